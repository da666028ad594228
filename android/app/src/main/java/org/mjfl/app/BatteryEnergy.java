package org.mjfl.app;

import com.google.gson.JsonObject;

/**
 * The energy a task took, from two battery readings taken around its training: the charge the
 * battery lost times its voltage. Plain Java: {@link AndroidFacts} reads the battery, this class
 * does the arithmetic and decides what a reading can and cannot tell.
 *
 * <p>{@code energy_j = (counterBefore - counterAfter) µAh × (voltageBefore + voltageAfter) / 2 mV
 * × 3.6e-6} (1 µAh = 3.6e-3 C; × V gives J). Sent in the result's {@code device_state}
 * (protocol.md 5.5): {@code energy_j}, {@code energy_source}, {@code battery_temp_c}.
 *
 * <p>What it cannot tell, reported as a null {@code energy_j} (never 0) with {@code energy_source}
 * saying why:
 * <ul>
 *   <li>{@code "unsupported"}: the fuel gauge has no charge counter. {@code
 *       BatteryManager.getIntProperty(BATTERY_PROPERTY_CHARGE_COUNTER)} then answers {@code
 *       Integer.MIN_VALUE} (apps targeting API 28+) or 0 (older targets), or the battery
 *       broadcast has no voltage.
 *   <li>{@code "charging"}: plugged in at either reading. The counter then counts the charger's
 *       current as well as the training's, so the difference is not what training took. We
 *       report nothing rather than a figure with a flag: a coordinator summing energy must not
 *       add a figure that can be negative or far too small.
 *   <li>{@code "counter_rose"}: unplugged, yet the counter went up (plugged in and out between
 *       the readings, or the gauge recalibrated).
 *   <li>{@code "unavailable"}: no battery broadcast (a device without a battery).
 * </ul>
 *
 * <p>Resolution: gauges update the counter in steps (often around 1 mAh, every few seconds or
 * more), so a task of a few seconds can read 0 J, and any reading is good to about one step
 * (1 mAh at 4 V is 14.4 J). The figure counts the whole phone's drain during training (screen,
 * radios, other apps), not the app's alone. Sums over many tasks are meaningful; one short task's
 * figure is not.
 */
public final class BatteryEnergy {
    /** What {@code getIntProperty} answers for a property the phone does not support (API 28+). */
    public static final int UNSUPPORTED = Integer.MIN_VALUE;
    /** Joules per µAh·mV. */
    static final double J_PER_UAH_MV = 3.6e-6;

    private BatteryEnergy() {}

    /**
     * One battery reading.
     *
     * @param chargeUah {@code BATTERY_PROPERTY_CHARGE_COUNTER}, µAh; {@link #UNSUPPORTED} or &lt;= 0: none
     * @param voltageMv {@code EXTRA_VOLTAGE}, mV; &lt;= 0: unknown
     * @param temperatureDeciC {@code EXTRA_TEMPERATURE}, tenths of °C; {@link #UNSUPPORTED}: unknown
     * @param plugged {@code EXTRA_PLUGGED} != 0; null if unknown
     */
    public record Reading(int chargeUah, int voltageMv, int temperatureDeciC, Boolean plugged) {}

    /**
     * What a task's device_state says of its energy.
     *
     * @param energyJ joules, null when not known
     * @param source {@code "battery"} when measured, else why not (see the class comment)
     * @param batteryTempC the battery's temperature after training, °C; null if unknown
     */
    public record Measurement(Double energyJ, String source, Double batteryTempC) {
        /** Adds {@code energy_j}, {@code energy_source} and {@code battery_temp_c} to {@code state}. */
        public JsonObject addTo(JsonObject state) {
            state.addProperty("energy_j", energyJ);
            state.addProperty("energy_source", source);
            state.addProperty("battery_temp_c", batteryTempC);
            return state;
        }
    }

    /** The energy between {@code before} and {@code after}; a null reading means no battery broadcast. */
    public static Measurement between(Reading before, Reading after) {
        Double temp = after == null || after.temperatureDeciC() == UNSUPPORTED ? null : after.temperatureDeciC() / 10.0;
        if (before == null || after == null) {
            return new Measurement(null, "unavailable", temp);
        }
        if (!counted(before) || !counted(after) || before.voltageMv() <= 0 || after.voltageMv() <= 0) {
            return new Measurement(null, "unsupported", temp);
        }
        if (Boolean.TRUE.equals(before.plugged()) || Boolean.TRUE.equals(after.plugged())) {
            return new Measurement(null, "charging", temp);
        }
        long lostUah = (long) before.chargeUah() - after.chargeUah();
        if (lostUah < 0) {
            return new Measurement(null, "counter_rose", temp);
        }
        double voltageMv = (before.voltageMv() + after.voltageMv()) / 2.0;
        return new Measurement(lostUah * voltageMv * J_PER_UAH_MV, "battery", temp);
    }

    private static boolean counted(Reading r) {
        return r.chargeUah() != UNSUPPORTED && r.chargeUah() > 0;
    }
}
