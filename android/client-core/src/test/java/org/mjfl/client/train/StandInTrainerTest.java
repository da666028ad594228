package org.mjfl.client.train;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Paths;
import java.util.List;
import java.util.concurrent.CancellationException;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.mjfl.client.protocol.DType;
import org.mjfl.client.protocol.Frames;
import org.mjfl.client.protocol.Half;
import org.mjfl.client.protocol.Message;
import org.mjfl.client.protocol.Tensor;

class StandInTrainerTest {
    static final Message.ModelSpec MODEL = new Message.ModelSpec("m", List.of(2L), 2);

    static TrainingTask task(List<Tensor> weights, double lr, long epochs, long batch) {
        Shard shard = new Shard(5, MODEL.inputShape(), new float[10], new long[5]);
        return new TrainingTask("t", "j", 1, MODEL, Paths.get("p"), shard, weights, epochs, batch, lr, 0.9, 0, Double.POSITIVE_INFINITY, 0);
    }

    @Test
    void scalesFloatingWeightsByOneMinusATenThousandthOfLr() {
        float[] w = {1, -2, 0.5f, 1e-3f};
        Tensor h = Tensor.ofBytes("h", DType.FLOAT16, new long[] {1}, new byte[] {0, 0x40}); // 2.0
        Tensor d = Tensor.ofBytes("d", DType.FLOAT64, new long[] {1}, Frames.i64(Double.doubleToLongBits(3.0)));
        Tensor n = Tensor.ofBytes("n", DType.INT64, new long[] {1}, Frames.i64(42));
        List<Tensor> global = List.of(Tensor.ofFloats("w", new long[] {2, 2}, w), h, d, n);
        TrainingResult r = new StandInTrainer().train(task(global, 0.5, 1, 2), () -> false);
        float scale = (float) (1 - 1e-4 * 0.5);
        float[] got = r.weights().get(0).toFloats();
        for (int i = 0; i < w.length; i++) {
            assertEquals(w[i] * scale, got[i]);
        }
        assertEquals(Half.toFloat(Half.fromFloat(2 * scale)), r.weights().get(1).toFloats()[0]);
        assertEquals(3.0 * scale, r.weights().get(2).toDoubles()[0], 1e-15);
        assertArrayEquals(new long[] {42}, r.weights().get(3).toLongs(), "integer tensors are left alone");
        for (int i = 0; i < global.size(); i++) {
            assertTrue(global.get(i).sameSpec(r.weights().get(i)), "the task's names, dtypes and shapes, in order");
        }
        assertEquals(5, r.samples(), "samples = shard size");
        assertEquals(0.0, r.meanLoss());
        assertTrue(r.computeS() >= 0);
    }

    @Test
    void itIsDeterministic() {
        List<Tensor> w = List.of(Tensor.ofFloats("w", new long[] {3}, new float[] {1, 2, 3}));
        assertEquals(new StandInTrainer().train(task(w, 0.05, 2, 2), () -> false).weights().get(0).data(),
                new StandInTrainer().train(task(w, 0.05, 2, 2), () -> false).weights().get(0).data());
    }

    @Test
    void checksForCancellationBetweenBatches() {
        AtomicInteger checks = new AtomicInteger();
        new StandInTrainer().train(task(List.of(), 0.1, 3, 2), () -> {
            checks.incrementAndGet();
            return false;
        });
        assertEquals(3 * 3, checks.get(), "3 epochs of ceil(5 / 2) batches");
        assertThrows(CancellationException.class, () -> new StandInTrainer().train(task(List.of(), 0.1, 3, 2), () -> true));
    }

    @Test
    void shardFromArtifactSplitsXAndYByTheInputShape() {
        byte[] x = Frames.f32(1, 2, 3, 4);
        byte[] y = Frames.i64(0, 1);
        byte[] all = new byte[x.length + y.length];
        System.arraycopy(x, 0, all, 0, x.length);
        System.arraycopy(y, 0, all, x.length, y.length);
        Shard s = Shard.fromArtifact(all, MODEL);
        assertEquals(2, s.n());
        assertArrayEquals(new float[] {1, 2, 3, 4}, s.x());
        assertArrayEquals(new long[] {0, 1}, s.y());
        assertThrows(IllegalArgumentException.class, () -> Shard.fromArtifact(new byte[7], MODEL));
    }

    @Test
    void aSlowerPhonesRoundEndsAtACancel() {
        // An hour-long round (--round-s 3600) answers a cancel that comes after the walk.
        List<Tensor> w = List.of(Tensor.ofFloats("w", new long[] {1}, new float[] {1}));
        AtomicInteger checks = new AtomicInteger();
        StandInTrainer slow = new StandInTrainer(3600);
        assertThrows(CancellationException.class, () -> slow.train(task(w, 0.1, 1, 5), () -> checks.incrementAndGet() > 3));
        assertTrue(checks.get() > 3, "the cancel was seen during the wait, not before it");
        assertThrows(IllegalArgumentException.class, () -> new StandInTrainer(-1));
    }
}
