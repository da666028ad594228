package org.mjfl.app;

import com.google.gson.JsonObject;

/**
 * The energy a task took, from two battery readings taken around its training: the charge the
 * battery lost times its voltage. Plain Java: {@link AndroidFacts} reads the battery, this class
 * normalises vendors' units, checks the figures are plausible, and decides what a reading can and
 * cannot tell.
 *
 * <p>{@code energy_j = (counterBefore - counterAfter) µAh × (voltageBefore + voltageAfter) / 2 mV
 * × 3.6e-6} (1 µAh = 3.6e-3 C; × V gives J). Sent in the result's {@code device_state}
 * (protocol.md 5.5): {@code energy_j}, {@code energy_source}, {@code energy_resolution_j}, {@code
 * battery_temp_c}.
 *
 * <p>Units: {@code EXTRA_VOLTAGE} is mV and the charge counter µAh, but some vendors report µV
 * or whole V, and a counter in mAh. A voltage of 100 000 or more is read as µV, one under 100 as
 * V; a counter under 100 000 (100 mAh in µAh: a flat battery) as mAh. After that, a voltage
 * outside 2.5 to 5.5 V, or a task that drew more than {@link #MAX_W} on average, is no reading.
 *
 * <p>What it cannot tell, reported as a null {@code energy_j} (never 0) with {@code energy_source}
 * saying why:
 * <ul>
 *   <li>{@code "unsupported"}: the fuel gauge has no charge counter. {@code
 *       BatteryManager.getIntProperty(BATTERY_PROPERTY_CHARGE_COUNTER)} then answers {@code
 *       Integer.MIN_VALUE} (apps targeting API 28+) or 0 (older targets), or the battery
 *       broadcast has no voltage.
 *   <li>{@code "implausible"}: the readings fail the unit and bounds checks above.
 *   <li>{@code "charging"}: on power at either reading ({@link DeviceState#onPower}: plugged in,
 *       or {@code dumpsys battery unplug} faking unplugged while the charger still charges). The
 *       counter then counts the charger's current as well as the training's.
 *   <li>{@code "counter_rose"}: unplugged, yet the counter went up (plugged in and out between
 *       the readings, or the gauge recalibrated).
 *   <li>{@code "unavailable"}: no battery broadcast (a device without a battery).
 * </ul>
 *
 * <p>Resolution: gauges update the counter in steps (from a few µAh to about 1% of the capacity),
 * so a task shorter than a step can read 0 J. {@code energy_resolution_j} is one step at the mean
 * voltage: the step is the smallest change of the counter seen so far ({@link CounterStep}), or
 * {@link #ASSUMED_STEP_UAH} until one is seen. The figure counts the whole phone's drain during
 * training (screen, radios, other apps), not the app's alone.
 */
public final class BatteryEnergy {
    /** What {@code getIntProperty} answers for a property the phone does not support (API 28+). */
    public static final int UNSUPPORTED = Integer.MIN_VALUE;
    /** Joules per µAh·mV. */
    static final double J_PER_UAH_MV = 3.6e-6;
    /** The counter's step assumed until a change is seen: 1 mAh, common on phones' gauges. */
    static final long ASSUMED_STEP_UAH = 1000;
    /** A Li-ion cell's voltage, mV: outside this, the reading's unit was not understood. */
    static final double MIN_MV = 2500;
    static final double MAX_MV = 5500;
    /** More than a phone's SoC and screen draw at full tilt: a larger mean power is a misreading. */
    static final double MAX_W = 30;

    private BatteryEnergy() {}

    /**
     * One battery reading, as Android gives it (units not yet checked).
     *
     * @param counter {@code BATTERY_PROPERTY_CHARGE_COUNTER} (µAh, some vendors mAh); {@link
     *     #UNSUPPORTED} or &lt;= 0: none
     * @param voltage {@code EXTRA_VOLTAGE} (mV, some vendors µV or V); &lt;= 0: unknown
     * @param temperatureDeciC {@code EXTRA_TEMPERATURE}, tenths of °C; {@link #UNSUPPORTED}: unknown
     * @param plugged {@code EXTRA_PLUGGED}; -1 if unknown
     * @param status {@code EXTRA_STATUS}; -1 if unknown
     * @param atS when it was read, seconds on the app's clock; NaN if unknown
     */
    public record Reading(long counter, int voltage, int temperatureDeciC, int plugged, int status, double atS) {
        boolean onPower() {
            return Boolean.TRUE.equals(DeviceState.onPower(plugged, status));
        }

        boolean counted() {
            return counter != UNSUPPORTED && counter > 0;
        }
    }

    /**
     * What a task's device_state says of its energy.
     *
     * @param energyJ joules, null when not known
     * @param source {@code "battery"} when measured, else why not (see the class comment)
     * @param batteryTempC the battery's temperature after training, °C; null if unknown
     * @param resolutionJ one step of the counter at the mean voltage, J; null without a plausible
     *     counter and voltage
     */
    public record Measurement(Double energyJ, String source, Double batteryTempC, Double resolutionJ) {
        /** Adds {@code energy_j}, {@code energy_source}, {@code energy_resolution_j} and {@code battery_temp_c}. */
        public JsonObject addTo(JsonObject state) {
            state.addProperty("energy_j", energyJ);
            state.addProperty("energy_source", source);
            state.addProperty("energy_resolution_j", resolutionJ);
            state.addProperty("battery_temp_c", batteryTempC);
            return state;
        }
    }

    /**
     * The counter's step: the smallest change between consecutive readings seen so far (every
     * change is a whole number of steps, so the smallest is the best estimate). Thread-safe.
     */
    public static final class CounterStep {
        private long last = UNSUPPORTED;
        private long step;

        /** Notes one reading of the counter, µAh (normalised); readings without one are skipped. */
        public synchronized void observe(long uah) {
            if (uah <= 0) {
                return;
            }
            long change = last == UNSUPPORTED ? 0 : Math.abs(uah - last);
            if (change > 0 && (step == 0 || change < step)) {
                step = change;
            }
            last = uah;
        }

        /** The step, µAh: {@link #ASSUMED_STEP_UAH} until the counter has been seen to change. */
        public synchronized long uah() {
            return step > 0 ? step : ASSUMED_STEP_UAH;
        }
    }

    /** The energy between {@code before} and {@code after}; a null reading means no battery broadcast. */
    public static Measurement between(Reading before, Reading after, CounterStep step) {
        Double temp = after == null || after.temperatureDeciC() == UNSUPPORTED ? null : after.temperatureDeciC() / 10.0;
        if (before == null || after == null) {
            return new Measurement(null, "unavailable", temp, null);
        }
        if (!before.counted() || !after.counted() || before.voltage() <= 0 || after.voltage() <= 0) {
            return new Measurement(null, "unsupported", temp, null);
        }
        double mvBefore = millivolts(before.voltage());
        double mvAfter = millivolts(after.voltage());
        if (!plausible(mvBefore) || !plausible(mvAfter)) {
            return new Measurement(null, "implausible", temp, null);
        }
        double scale = microAmpHoursPerUnit(before.counter(), after.counter());
        double voltageMv = (mvBefore + mvAfter) / 2;
        double resolutionJ = step.uah() * voltageMv * J_PER_UAH_MV;
        if (before.onPower() || after.onPower()) {
            return new Measurement(null, "charging", temp, resolutionJ);
        }
        double lostUah = (before.counter() - after.counter()) * scale;
        if (lostUah < 0) {
            return new Measurement(null, "counter_rose", temp, resolutionJ);
        }
        double energyJ = lostUah * voltageMv * J_PER_UAH_MV;
        double seconds = after.atS() - before.atS();
        if (seconds > 0 && energyJ / seconds > MAX_W) {
            return new Measurement(null, "implausible", temp, resolutionJ);
        }
        return new Measurement(energyJ, "battery", temp, resolutionJ);
    }

    /** A reading's counter in µAh (the units of both readings, decided by the larger). */
    static long microAmpHours(long counter) {
        return Math.round(counter * microAmpHoursPerUnit(counter, counter));
    }

    private static double microAmpHoursPerUnit(long a, long b) {
        return Math.max(a, b) < 100_000 ? 1000 : 1;
    }

    /** {@code EXTRA_VOLTAGE} in mV: µV and V normalised (see the class comment). */
    static double millivolts(int voltage) {
        if (voltage >= 100_000) {
            return voltage / 1000.0;
        }
        return voltage < 100 ? voltage * 1000.0 : voltage;
    }

    private static boolean plausible(double mv) {
        return mv >= MIN_MV && mv <= MAX_MV;
    }
}
