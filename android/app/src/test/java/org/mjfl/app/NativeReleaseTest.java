package org.mjfl.app;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import org.junit.jupiter.api.Test;

class NativeReleaseTest {
    /** fbjni's HybridData as the release reaches it. */
    public static final class Hybrid {
        int resets;

        public void resetNative() {
            resets++;
        }
    }

    /** An SGD as ExecuTorch's: a private mHybridData, no close(). */
    static final class Optimizer {
        private final Hybrid mHybridData = new Hybrid();
    }

    /** Another runtime build's SGD: no such field. */
    static final class Other {}

    /** A logger at INFO, the app's logcat handler's level, keeping what it would show. */
    static Logger logger(List<LogRecord> shown) {
        Logger log = Logger.getAnonymousLogger();
        log.setUseParentHandlers(false);
        log.setLevel(Level.INFO);
        log.addHandler(new Handler() {
            @Override
            public void publish(LogRecord r) {
                if (log.isLoggable(r.getLevel())) {
                    shown.add(r);
                }
            }

            @Override
            public void flush() {}

            @Override
            public void close() {}
        });
        return log;
    }

    @Test
    void theHybridDataIsResetAtOnce() {
        List<LogRecord> shown = new ArrayList<>();
        Optimizer sgd = new Optimizer();
        assertTrue(NativeRelease.resetNative(sgd, Optimizer.class, "the optimizer's native memory", logger(shown)));
        assertEquals(1, sgd.mHybridData.resets);
        assertEquals(List.of(), shown);
    }

    @Test
    void aReleaseThatFailsIsAWarningTheLogcatHandlerShows() {
        List<LogRecord> shown = new ArrayList<>();
        assertFalse(NativeRelease.resetNative(new Other(), Other.class, "the optimizer's native memory", logger(shown)));
        assertEquals(1, shown.size());
        assertEquals(Level.WARNING, shown.get(0).getLevel());
        assertTrue(shown.get(0).getMessage().startsWith("cannot free the optimizer's native memory now"
                + " (java.lang.NoSuchFieldException: mHybridData)"), shown.get(0).getMessage());
    }
}
