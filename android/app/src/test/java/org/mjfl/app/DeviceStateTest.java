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
        JsonObject o = new DeviceState(81, true, 2).toJson();
        assertEquals(81, o.get("battery_pct").getAsInt());
        assertTrue(o.get("charging").getAsBoolean());
        assertEquals(2, o.get("thermal_status").getAsInt());
        JsonObject unknown = new DeviceState(null, null, null).toJson();
        assertTrue(unknown.get("thermal_status").isJsonNull());
        assertEquals(3, unknown.size());
    }

    @Test
    void describesForPeople() {
        assertEquals("battery 81% (charging), thermal 2 (moderate)", new DeviceState(81, true, 2).describe());
        assertEquals("battery unknown, thermal unknown", new DeviceState(null, false, null).describe());
    }
}
