package org.mjfl.app;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import org.junit.jupiter.api.Test;

class DeviceStateTest {
    @Test
    void batteryPercentFromLevelAndScale() {
        assertEquals(81, DeviceState.batteryPct(81, 100));
        assertEquals(50, DeviceState.batteryPct(128, 256));
        assertEquals(33, DeviceState.batteryPct(1, 3));
        assertNull(DeviceState.batteryPct(-1, 100));
        assertNull(DeviceState.batteryPct(50, 0));
    }

    @Test
    void jsonHasEveryFieldAndNullsWhenUnknown() {
        JsonObject o = new DeviceState(81, true, "usb", 2).toJson();
        assertEquals(81, o.get("battery_pct").getAsInt());
        assertTrue(o.get("charging").getAsBoolean());
        assertEquals("usb", o.get("plugged").getAsString());
        assertEquals(2, o.get("thermal_status").getAsInt());
        JsonObject unknown = new DeviceState(null, null, null, null).toJson();
        assertTrue(unknown.get("thermal_status").isJsonNull());
        assertTrue(unknown.get("plugged").isJsonNull());
        assertEquals(4, unknown.size());
    }

    @Test
    void thePlugIsNamedByAndroidsBits() {
        assertEquals("none", DeviceState.plugType(0));
        assertEquals("ac", DeviceState.plugType(1));
        assertEquals("usb", DeviceState.plugType(2));
        assertEquals("wireless", DeviceState.plugType(4));
        assertEquals("dock", DeviceState.plugType(8));
        assertNull(DeviceState.plugType(-1), "no battery broadcast");
        assertNull(DeviceState.plugType(64), "a bit Android does not define");
    }

    @Test
    void aFakedUnplugThatStillChargesIsOnPower() {
        int discharging = 3;
        assertEquals(true, DeviceState.onPower(2, discharging), "plugged: on power whatever the status");
        assertEquals(false, DeviceState.onPower(0, discharging));
        // `dumpsys battery unplug`: EXTRA_PLUGGED 0, the charger's status still CHARGING.
        assertEquals(true, DeviceState.onPower(0, DeviceState.STATUS_CHARGING));
        assertNull(DeviceState.onPower(-1, -1));
    }

    @Test
    void describesForPeople() {
        assertEquals("battery 81% (charging, usb), thermal 2 (moderate)", new DeviceState(81, true, "usb", 2).describe());
        assertEquals("battery unknown, thermal unknown", new DeviceState(null, false, "none", null).describe());
    }
}
