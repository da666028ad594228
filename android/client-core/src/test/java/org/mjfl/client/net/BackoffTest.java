package org.mjfl.client.net;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Random;
import org.junit.jupiter.api.Test;

class BackoffTest {
    /** A Random whose nextDouble is fixed: the jitter's two ends. */
    static Random fixed(double v) {
        return new Random() {
            @Override
            public double nextDouble() {
                return v;
            }
        };
    }

    @Test
    void withoutJitterItDoublesFromHalfASecondUpToThirty() {
        Backoff b = Backoff.defaults(fixed(0));
        double[] want = {0.5, 1, 2, 4, 8, 16, 30, 30};
        for (int a = 0; a < want.length; a++) {
            assertEquals(want[a], b.delay(a), 1e-12, "attempt " + a);
        }
        assertEquals(30, b.delay(10_000), 1e-12, "no overflow");
    }

    @Test
    void jitterTakesUpToHalfOff() {
        assertEquals(0.25, Backoff.defaults(fixed(1)).delay(0), 1e-12);
        assertEquals(15, Backoff.defaults(fixed(1)).delay(20), 1e-12);
        Backoff b = Backoff.defaults(new Random(9));
        double min = Double.MAX_VALUE;
        double max = 0;
        for (int i = 0; i < 10_000; i++) {
            double d = b.delay(3); // base 4 s
            assertTrue(d > 2 && d <= 4, "delay " + d);
            min = Math.min(min, d);
            max = Math.max(max, d);
        }
        assertTrue(min < 2.1 && max > 3.9, "the jitter spreads over the whole range");
    }

    @Test
    void seedsGiveRepeatableButDifferentSpreads() {
        assertEquals(Backoff.defaults(new Random(1)).delay(2), Backoff.defaults(new Random(1)).delay(2));
        assertNotEquals(Backoff.defaults(new Random(1)).delay(2), Backoff.defaults(new Random(2)).delay(2));
    }

    @Test
    void nonsenseSettingsAreRefused() {
        assertThrows(IllegalArgumentException.class, () -> new Backoff(1, 0.5, 30, 0.5, new Random()));
        assertThrows(IllegalArgumentException.class, () -> new Backoff(1, 2, 30, 1.5, new Random()));
        assertThrows(IllegalArgumentException.class, () -> new Backoff(40, 2, 30, 0.5, new Random()));
    }
}
