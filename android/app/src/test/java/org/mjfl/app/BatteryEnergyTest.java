package org.mjfl.app;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import org.junit.jupiter.api.Test;

class BatteryEnergyTest {
    static final int DISCHARGING = 3;
    static final int USB = 2;

    /** A reading on battery, at no known time (the power bound is not checked). */
    static BatteryEnergy.Reading unplugged(long counter, int voltage) {
        return new BatteryEnergy.Reading(counter, voltage, 312, 0, DISCHARGING, Double.NaN);
    }

    static BatteryEnergy.Reading at(double s, long counter, int voltage) {
        return new BatteryEnergy.Reading(counter, voltage, 312, 0, DISCHARGING, s);
    }

    static BatteryEnergy.Measurement between(BatteryEnergy.Reading a, BatteryEnergy.Reading b) {
        return BatteryEnergy.between(a, b, new BatteryEnergy.CounterStep());
    }

    @Test
    void chargeLostTimesTheMeanVoltageIsTheEnergy() {
        // 1 mAh at 4.0 V on average: 1e-3 Ah * 3600 s/h * 4 V = 14.4 J.
        BatteryEnergy.Measurement m = between(at(0, 3_001_000, 4100), at(10, 3_000_000, 3900));
        assertEquals(14.4, m.energyJ(), 1e-9);
        assertEquals("battery", m.source());
        assertEquals(31.2, m.batteryTempC(), 1e-9);
        assertEquals(14.4, m.resolutionJ(), 1e-9, "no step seen yet: 1000 µAh assumed");
    }

    @Test
    void aCounterThatDidNotMoveIsZeroJoulesNotUnknown() {
        // The gauge's step is coarse: a short task can read no change; that is a measurement.
        BatteryEnergy.Measurement m = between(unplugged(2_000_000, 4000), unplugged(2_000_000, 4000));
        assertEquals(0.0, m.energyJ());
        assertEquals("battery", m.source());
    }

    @Test
    void aPhoneWithoutAChargeCounterReportsNullNeverZero() {
        for (int none : new int[] {BatteryEnergy.UNSUPPORTED, 0, -5}) {
            BatteryEnergy.Measurement m = between(unplugged(none, 4000), unplugged(none, 4000));
            assertNull(m.energyJ(), "counter " + none);
            assertEquals("unsupported", m.source());
            assertNull(m.resolutionJ());
        }
        BatteryEnergy.Measurement noVoltage = between(unplugged(10, -1), unplugged(5, 4000));
        assertNull(noVoltage.energyJ());
        assertEquals("unsupported", noVoltage.source());
    }

    @Test
    void onPowerAtEitherEndOrACounterThatRoseIsNotAMeasurement() {
        BatteryEnergy.Reading plugged = new BatteryEnergy.Reading(2_999_000, 4000, 312, USB, DeviceState.STATUS_CHARGING, 1);
        BatteryEnergy.Measurement charging = between(unplugged(3_000_000, 4000), plugged);
        assertNull(charging.energyJ());
        assertEquals("charging", charging.source());
        assertEquals(14.4, charging.resolutionJ(), 1e-9, "the reading's resolution is still known");
        assertEquals("charging", between(plugged, unplugged(2_990_000, 4000)).source());
        BatteryEnergy.Measurement rose = between(unplugged(3_000_000, 4000), unplugged(3_000_500, 4000));
        assertNull(rose.energyJ());
        assertEquals("counter_rose", rose.source());
    }

    @Test
    void aFakedUnplugStillChargingIsCharging() {
        // `dumpsys battery unplug`: EXTRA_PLUGGED reads 0, the charger's status is still CHARGING.
        BatteryEnergy.Reading faked = new BatteryEnergy.Reading(2_999_000, 4000, 312, 0, DeviceState.STATUS_CHARGING, 5);
        BatteryEnergy.Measurement m = between(at(0, 3_000_000, 4000), faked);
        assertNull(m.energyJ());
        assertEquals("charging", m.source());
    }

    @Test
    void vendorsUnitsAreNormalised() {
        // µV and mAh: 3.95 V as 3_950_000 µV, a counter of 3001 then 3000 mAh.
        BatteryEnergy.Measurement m = between(at(0, 3001, 3_950_000), at(600, 3000, 4_050_000));
        assertEquals(14.4, m.energyJ(), 1e-9);
        assertEquals("battery", m.source());
        // Whole volts (EXTRA_VOLTAGE is an int: 4 V).
        assertEquals(14.4, between(at(0, 3_001_000, 4), at(600, 3_000_000, 4)).energyJ(), 1e-9);
        assertEquals(4000.0, BatteryEnergy.millivolts(4_000_000));
        assertEquals(3_000_000L, BatteryEnergy.microAmpHours(3000));
        assertEquals(3_000_000L, BatteryEnergy.microAmpHours(3_000_000));
    }

    @Test
    void readingsOutsideTheBoundsAreImplausible() {
        // 1.2 V and 7 V are no Li-ion cell's, in any unit.
        for (int mv : new int[] {1200, 7000, 7_000_000}) {
            BatteryEnergy.Measurement m = between(at(0, 3_001_000, mv), at(600, 3_000_000, 4000));
            assertEquals("implausible", m.source(), mv + " mV");
            assertNull(m.energyJ());
        }
        // 100 mAh in 10 s at 4 V is 144 W: more than a phone can draw.
        BatteryEnergy.Measurement tooMuch = between(at(0, 3_100_000, 4000), at(10, 3_000_000, 4000));
        assertEquals("implausible", tooMuch.source());
        assertNull(tooMuch.energyJ());
        // The same charge over 10 minutes is 2.4 W: measured.
        assertEquals("battery", between(at(0, 3_100_000, 4000), at(600, 3_000_000, 4000)).source());
    }

    @Test
    void theStepIsTheSmallestChangeSeen() {
        BatteryEnergy.CounterStep step = new BatteryEnergy.CounterStep();
        assertEquals(BatteryEnergy.ASSUMED_STEP_UAH, step.uah());
        step.observe(3_000_000);
        step.observe(3_000_000);
        assertEquals(BatteryEnergy.ASSUMED_STEP_UAH, step.uah(), "no change yet");
        step.observe(2_999_000);
        step.observe(2_998_500);
        step.observe(2_997_000);
        assertEquals(500, step.uah());
        BatteryEnergy.Measurement m = BatteryEnergy.between(unplugged(3_000_000, 4000), unplugged(3_000_000, 4000), step);
        assertEquals(7.2, m.resolutionJ(), 1e-9);
    }

    @Test
    void withoutABatteryBroadcastNothingIsKnown() {
        BatteryEnergy.Measurement m = between(null, null);
        assertNull(m.energyJ());
        assertNull(m.batteryTempC());
        assertNull(m.resolutionJ());
        assertEquals("unavailable", m.source());
        BatteryEnergy.Reading noTemp = new BatteryEnergy.Reading(10, 4000, BatteryEnergy.UNSUPPORTED, 0, DISCHARGING, 1);
        assertNull(between(unplugged(20, 4000), noTemp).batteryTempC());
        assertEquals(-0.5, between(null, new BatteryEnergy.Reading(1, 1, -5, -1, -1, 0)).batteryTempC(), 1e-12);
    }

    @Test
    void theFieldsJoinTheDeviceState() {
        JsonObject state = new DeviceState(80, false, "none", 0).toJson();
        new BatteryEnergy.Measurement(12.5, "battery", 30.1, 14.4).addTo(state);
        assertEquals(12.5, state.get("energy_j").getAsDouble());
        assertEquals("battery", state.get("energy_source").getAsString());
        assertEquals(14.4, state.get("energy_resolution_j").getAsDouble());
        assertEquals(30.1, state.get("battery_temp_c").getAsDouble());
        assertEquals(80, state.get("battery_pct").getAsInt());
        assertEquals("none", state.get("plugged").getAsString());
        JsonObject unknown = new BatteryEnergy.Measurement(null, "implausible", null, null).addTo(new JsonObject());
        assertTrue(unknown.get("energy_j").isJsonNull(), "null is sent, so the coordinator knows it is not known");
        assertTrue(unknown.get("energy_resolution_j").isJsonNull());
        assertTrue(unknown.get("battery_temp_c").isJsonNull());
    }
}
