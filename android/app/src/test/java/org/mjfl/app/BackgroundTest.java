package org.mjfl.app;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.Test;

class BackgroundTest {
    @Test
    void aCloseThatWaitsDoesNotHoldTheCaller() throws Exception {
        CountDownLatch trainingEnds = new CountDownLatch(1);
        AtomicBoolean closed = new AtomicBoolean();
        // As ExecuTorchTrainer.close waits for the task in training to let go of the trainer.
        AutoCloseable trainer = () -> {
            trainingEnds.await();
            closed.set(true);
        };
        Thread t = Background.close(trainer, "trainer", (line, e) -> {});
        assertFalse(closed.get(), "returned while the close still waits");
        trainingEnds.countDown();
        t.join(TimeUnit.SECONDS.toMillis(30));
        assertTrue(closed.get());
    }

    @Test
    void aFailedCloseIsLoggedNotThrown() throws Exception {
        List<String> lines = new ArrayList<>();
        Thread t = Background.close(() -> {
            throw new IllegalStateException("native fault");
        }, "trainer", (line, e) -> lines.add(line + ": " + e.getMessage()));
        t.join(TimeUnit.SECONDS.toMillis(30));
        assertEquals(List.of("cannot close the trainer: native fault"), lines);
    }
}
