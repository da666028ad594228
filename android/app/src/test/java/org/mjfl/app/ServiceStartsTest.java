package org.mjfl.app;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

class ServiceStartsTest {
    /** Stands for Android 12's ForegroundServiceStartNotAllowedException (an IllegalStateException). */
    static final class NotAllowed extends IllegalStateException {
        private static final long serialVersionUID = 1L;

        NotAllowed(String m) {
            super(m);
        }
    }

    @Test
    void aStartThatWentSaysNothing() {
        List<String> started = new ArrayList<>();
        assertNull(ServiceStarts.attempt(() -> started.add("service"), e -> false));
        assertEquals(List.of("service"), started);
    }

    @Test
    void androidsRefusalsAreOneLineNeverACrash() {
        String asleep = ServiceStarts.attempt(() -> {
            throw new NotAllowed("startForegroundService() not allowed due to mAllowStartForeground false");
        }, e -> e instanceof NotAllowed);
        assertTrue(asleep.startsWith("not started: Android does not allow a foreground service to start now"), asleep);
        assertTrue(asleep.contains("mAllowStartForeground false") && asleep.contains("unlock"), asleep);
        String background = ServiceStarts.attempt(() -> {
            throw new IllegalStateException("Not allowed to start service Intent: app is in background");
        }, e -> e instanceof NotAllowed);
        assertEquals("not started: Android refused the service's start (Not allowed to start service Intent: app is in"
                + " background)", background);
        String permission = ServiceStarts.attempt(() -> {
            throw new SecurityException("Permission Denial: FOREGROUND_SERVICE_DATA_SYNC");
        }, e -> false);
        assertEquals("not started: permission refused: Permission Denial: FOREGROUND_SERVICE_DATA_SYNC", permission);
    }

    @Test
    void otherErrorsAreBugsAndPropagate() {
        assertThrows(NullPointerException.class, () -> ServiceStarts.attempt(() -> {
            throw new NullPointerException("bug");
        }, e -> true));
    }

    @Test
    void aRebootedPhoneSaysItWaitsForTheFirstUnlock() {
        assertTrue(ServiceStarts.afterBoot(ServiceStarts.LOCKED_BOOT_COMPLETED).contains("only after the first unlock"));
        assertTrue(ServiceStarts.afterBoot(ServiceStarts.BOOT_COMPLETED).contains("can be started"));
        assertNull(ServiceStarts.afterBoot("android.intent.action.BATTERY_CHANGED"));
    }
}
