package org.mjfl.app;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CancellationException;
import org.junit.jupiter.api.Test;
import org.mjfl.client.train.TrainingResult;

class WakefulTrainerTest {
    /** What the trainer asked of the wake lock, and when training ran, in order. */
    final List<String> log = new ArrayList<>();
    final WakefulTrainer.WakeLock lock = ms -> log.add("hold " + ms + " ms");

    @Test
    void theLockIsHeldUntilTheDeadlineWhileTrainingThenOnlyForTheAnswer() throws Exception {
        WakefulTrainer t = new WakefulTrainer((task, cancelled) -> {
            log.add("training");
            return new TrainingResult(List.of(), 1, 0.5, 1);
        }, lock, () -> 1000.0);
        t.train(Tasks.dueAt(1120.0), () -> false);
        assertEquals(List.of("hold 130000 ms", "training", "hold 10000 ms"), log, "deadline 120 s away, plus 10 s");
    }

    @Test
    void howeverTrainingEndsTheLockIsCutDown() {
        WakefulTrainer t = new WakefulTrainer((task, cancelled) -> {
            log.add("training");
            throw new CancellationException();
        }, lock, () -> 0.0);
        assertThrows(CancellationException.class, () -> t.train(Tasks.dueAt(5.0), () -> true));
        WakefulTrainer broken = new WakefulTrainer((task, cancelled) -> {
            throw new UnsatisfiedLinkError("no libexecutorch.so");
        }, lock, () -> 0.0);
        assertThrows(UnsatisfiedLinkError.class, () -> broken.train(Tasks.dueAt(5.0), () -> false));
        assertEquals(List.of("hold 15000 ms", "training", "hold 10000 ms", "hold 15000 ms", "hold 10000 ms"), log);
    }

    @Test
    void noTaskHoldsItLongerThanTheBound() {
        long longest = (long) ((WakefulTrainer.LONGEST_S + WakefulTrainer.ANSWER_S) * 1000);
        assertEquals(longest, WakefulTrainer.holdMs(Double.POSITIVE_INFINITY, 5.0), "no deadline");
        assertEquals(longest, WakefulTrainer.holdMs(1e9, 5.0), "a deadline days away");
        assertEquals(longest, WakefulTrainer.holdMs(Double.NaN, 5.0));
        assertEquals(10_000, WakefulTrainer.holdMs(4.0, 5.0), "already past: the answer's time only");
        assertEquals(10_001, WakefulTrainer.holdMs(5.0005, 5.0), "rounded up to the millisecond");
    }
}
