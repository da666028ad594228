package org.mjfl.app;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CancellationException;
import org.junit.jupiter.api.Test;
import org.mjfl.client.protocol.Message;
import org.mjfl.client.train.Shard;
import org.mjfl.client.train.TrainingResult;
import org.mjfl.client.train.TrainingTask;

class StatusTest {
    private static TrainingTask task() {
        return new TrainingTask("t-7", "cnn", 3, new Message.ModelSpec("cnn", List.of(1L), 2), Path.of("p.pte"),
                new Shard(1, List.of(1L), new float[1], new long[1]), List.of(), 1, 1, 0.1, 0, 0,
                Double.POSITIVE_INFINITY, 5);
    }

    @Test
    void theBoardFollowsTheTrainer() throws Exception {
        StatusBoard board = new StatusBoard();
        List<StatusBoard.Status> seen = new ArrayList<>();
        board.listen(seen::add);
        board.started("pixel-1", "ws://127.0.0.1:8765");
        List<String> during = new ArrayList<>();
        ReportingTrainer t = new ReportingTrainer((task, cancelled) -> {
            during.add(board.status().task());
            return new TrainingResult(List.of(), 600, 0.69314, 12.345);
        }, board);
        t.train(task(), () -> false);
        assertEquals(List.of("cnn round 3 (t-7)"), during);
        assertNull(board.status().task());
        assertEquals("cnn round 3 (t-7): loss 0.6931 over 600 samples, 12.35 s", board.status().lastAnswer());
        assertTrue(seen.size() >= 4, "the listener sees every change");

        ReportingTrainer cancelled = new ReportingTrainer((task, c) -> {
            throw new CancellationException();
        }, board);
        assertThrows(CancellationException.class, () -> cancelled.train(task(), () -> true));
        assertEquals("cnn round 3 (t-7): cancelled", board.status().lastAnswer());

        ReportingTrainer nan = new ReportingTrainer((task, c) -> new TrainingResult(List.of(), 1, Double.NaN, 1), board);
        nan.train(task(), () -> false);
        assertTrue(board.status().lastAnswer().contains("diverged"), board.status().lastAnswer());
    }

    @Test
    void theScreenSaysHowToStartBeforeADeviceRuns() {
        String empty = StatusText.of(StatusBoard.Status.EMPTY);
        assertTrue(empty.contains("adb shell am start -n org.mjfl.app/.StartActivity --es url"), empty);
        StatusBoard b = new StatusBoard();
        b.started("pixel-1", "ws://127.0.0.1:8765");
        b.connection("connected to coord-1");
        b.deviceState("battery 81%, thermal 0 (none)");
        String text = StatusText.of(b.status());
        assertTrue(text.contains("Connection: connected to coord-1"), text);
        assertTrue(text.contains("Training: idle"), text);
        assertTrue(text.contains("battery 81%"), text);
    }

    @Test
    void whyTheDeviceStoppedIsOnTheScreen() {
        assertEquals("stopped: no task can train on this phone: the ExecuTorch runtime cannot load",
                StatusText.stopped(org.mjfl.client.Device.Stop.CANNOT_TRAIN, "the ExecuTorch runtime cannot load"));
        assertTrue(StatusText.stopped(org.mjfl.client.Device.Stop.COORDINATOR_BYE, null).contains("said bye"));
    }
}
