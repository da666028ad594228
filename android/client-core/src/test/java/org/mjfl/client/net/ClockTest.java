package org.mjfl.client.net;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

class ClockTest {
    @Test
    void aNanosecondCounterReadsInSeconds() {
        AtomicLong nanos = new AtomicLong(2_500_000_000L);
        Clock c = Clock.ofNanos(nanos::get);
        assertEquals(2.5, c.now(), 1e-12);
        nanos.addAndGet(90_000_000_000L); // 90 s, asleep or not: the counter the platform gives counts them
        assertEquals(92.5, c.now(), 1e-12);
    }

    @Test
    void theDefaultClockIsMonotonic() {
        double a = Clock.SYSTEM.now();
        double b = Clock.SYSTEM.now();
        assertTrue(b >= a, a + " then " + b);
    }
}
