package org.mjfl.app;

import java.util.function.Predicate;

/**
 * Starting {@link DeviceService} without dying of it, and saying why it cannot start. Plain Java: {@link StartActivity} passes the
 * start and a test for Android 12's {@code ForegroundServiceStartNotAllowedException}.
 */
final class ServiceStarts {
    private ServiceStarts() {}

    /**
     * Runs {@code start}; returns null when it went, else the one line to log (tag MJFL) saying
     * why it did not. Android throws instead of starting: {@code
     * ForegroundServiceStartNotAllowedException} (an {@link IllegalStateException}, Android 12+)
     * when the app may not start a foreground service now (asleep, locked, restricted in the
     * background), another {@link IllegalStateException} when a background start is refused
     * (older Android), a {@link SecurityException} when a permission is missing.
     *
     * @param notAllowed whether an exception is {@code ForegroundServiceStartNotAllowedException}
     */
    static String attempt(Runnable start, Predicate<RuntimeException> notAllowed) {
        try {
            start.run();
            return null;
        } catch (IllegalStateException | SecurityException e) {
            if (notAllowed.test(e)) {
                return "not started: Android does not allow a foreground service to start now (" + e.getMessage()
                        + "): unlock the phone's screen and start again, or exempt the app from battery optimisation"
                        + " (mjfl devices prepare)";
            }
            if (e instanceof SecurityException) {
                return "not started: permission refused: " + e.getMessage();
            }
            return "not started: Android refused the service's start (" + e.getMessage() + ")";
        }
    }

    static final String LOCKED_BOOT_COMPLETED = "android.intent.action.LOCKED_BOOT_COMPLETED";
    static final String BOOT_COMPLETED = "android.intent.action.BOOT_COMPLETED";

    /** {@link BootLog}'s line for a boot broadcast's action; null for any other. */
    static String afterBoot(String action) {
        if (LOCKED_BOOT_COMPLETED.equals(action)) {
            return "the phone booted: with a screen lock, the device can start only after the first unlock;"
                    + " unlock the phone, then start it again (am start, or the bridge)";
        }
        if (BOOT_COMPLETED.equals(action)) {
            return "the phone is unlocked since boot: the device can be started";
        }
        return null;
    }
}
