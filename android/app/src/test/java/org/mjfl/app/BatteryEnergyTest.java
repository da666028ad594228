package org.mjfl.app;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import org.junit.jupiter.api.Test;

class BatteryEnergyTest {
    static BatteryEnergy.Reading reading(int chargeUah, int voltageMv, Boolean plugged) {
        return new BatteryEnergy.Reading(chargeUah, voltageMv, 312, plugged);
    }

    @Test
    void chargeLostTimesTheMeanVoltageIsTheEnergy() {
        // 1 mAh at 4.0 V on average: 1e-3 Ah * 3600 s/h * 4 V = 14.4 J.
        BatteryEnergy.Measurement m = BatteryEnergy.between(reading(3_001_000, 4100, false), reading(3_000_000, 3900, false));
        assertEquals(14.4, m.energyJ(), 1e-9);
        assertEquals("battery", m.source());
        assertEquals(31.2, m.batteryTempC(), 1e-9);
    }

    @Test
    void aCounterThatDidNotMoveIsZeroJoulesNotUnknown() {
        // The gauge's step is coarse: a short task can read no change; that is a measurement.
        BatteryEnergy.Measurement m = BatteryEnergy.between(reading(2_000_000, 4000, null), reading(2_000_000, 4000, null));
        assertEquals(0.0, m.energyJ());
        assertEquals("battery", m.source());
    }

    @Test
    void aPhoneWithoutAChargeCounterReportsNullNeverZero() {
        for (int none : new int[] {BatteryEnergy.UNSUPPORTED, 0, -5}) {
            BatteryEnergy.Measurement m = BatteryEnergy.between(reading(none, 4000, false), reading(none, 4000, false));
            assertNull(m.energyJ(), "counter " + none);
            assertEquals("unsupported", m.source());
        }
        BatteryEnergy.Measurement noVoltage = BatteryEnergy.between(reading(10, -1, false), reading(5, 4000, false));
        assertNull(noVoltage.energyJ());
        assertEquals("unsupported", noVoltage.source());
    }

    @Test
    void chargingAtEitherEndOrACounterThatRoseIsNotAMeasurement() {
        BatteryEnergy.Measurement charging = BatteryEnergy.between(reading(3_000_000, 4000, false), reading(2_999_000, 4000, true));
        assertNull(charging.energyJ());
        assertEquals("charging", charging.source());
        assertEquals("charging", BatteryEnergy.between(reading(3_000_000, 4000, true), reading(2_990_000, 4000, false)).source());
        BatteryEnergy.Measurement rose = BatteryEnergy.between(reading(3_000_000, 4000, false), reading(3_000_500, 4000, false));
        assertNull(rose.energyJ());
        assertEquals("counter_rose", rose.source());
    }

    @Test
    void withoutABatteryBroadcastNothingIsKnown() {
        BatteryEnergy.Measurement m = BatteryEnergy.between(null, null);
        assertNull(m.energyJ());
        assertNull(m.batteryTempC());
        assertEquals("unavailable", m.source());
        BatteryEnergy.Reading noTemp = new BatteryEnergy.Reading(10, 4000, BatteryEnergy.UNSUPPORTED, false);
        assertNull(BatteryEnergy.between(reading(20, 4000, false), noTemp).batteryTempC());
        assertEquals(-0.5, BatteryEnergy.between(null, new BatteryEnergy.Reading(1, 1, -5, null)).batteryTempC(), 1e-12);
    }

    @Test
    void theFieldsJoinTheDeviceState() {
        JsonObject state = new DeviceState(80, false, 0).toJson();
        new BatteryEnergy.Measurement(12.5, "battery", 30.1).addTo(state);
        assertEquals(12.5, state.get("energy_j").getAsDouble());
        assertEquals("battery", state.get("energy_source").getAsString());
        assertEquals(30.1, state.get("battery_temp_c").getAsDouble());
        assertEquals(80, state.get("battery_pct").getAsInt());
        JsonObject unknown = new BatteryEnergy.Measurement(null, "charging", null).addTo(new JsonObject());
        assertTrue(unknown.get("energy_j").isJsonNull(), "null is sent, so the coordinator knows it is not known");
        assertTrue(unknown.get("battery_temp_c").isJsonNull());
    }
}
