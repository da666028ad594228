package org.mjfl.app;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

class StayAwakeTest {
    final List<String> calls = new ArrayList<>();
    final List<String> lines = new ArrayList<>();
    final StayAwake awake = new StayAwake(new StayAwake.Lock() {
        @Override
        public void acquire() {
            calls.add("acquire");
        }

        @Override
        public void release() {
            calls.add("release");
        }
    }, lines::add);

    @Test
    void heldWhileEnrolledAndOnPowerOnly() {
        awake.onPower(true);
        assertFalse(awake.held(), "no device runs: the phone may sleep");
        awake.enrolled(true);
        assertTrue(awake.held());
        awake.onPower(true); // the battery broadcast repeats at every level change
        awake.onPower(false);
        assertFalse(awake.held(), "unplugged: on battery the app keeps nothing awake");
        awake.onPower(true);
        awake.enrolled(false);
        assertFalse(awake.held());
        assertEquals(List.of("acquire", "release", "acquire", "release"), calls, "each change once, never twice");
        assertEquals(4, lines.size(), "each change says so in logcat: " + lines);
    }

    @Test
    void anUnknownPowerStateCountsAsBattery() {
        awake.enrolled(true);
        awake.onPower(null);
        assertFalse(awake.held());
        assertEquals(List.of(), calls);
    }
}
