package org.mjfl.client.train;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CancellationException;
import java.util.function.BooleanSupplier;
import org.mjfl.client.protocol.Half;
import org.mjfl.client.protocol.Tensor;

/**
 * A stand-in for training, for devices on a plain JVM, which has no ExecuTorch runtime: it
 * does NOT run the job's program and does NOT learn. It walks the shard batch by batch for the
 * task's epochs, reading every input value (real work, honestly timed, no sleeping), checks for
 * cancellation between batches, then returns the global weights with one small deterministic
 * update: every floating-point weight multiplied by {@code (1 - 1e-4 * lr)}; integer tensors
 * unchanged. {@code samples} is the shard size and {@code mean_loss} is 0.0.
 *
 * <p>Its results are valid protocol traffic that moves a global model by almost nothing: use it
 * to test the wire, scheduling and timing, never to measure learning.
 *
 * <p>{@code roundS}: take at least this long per task, as a slower phone would (the walk takes
 * milliseconds); the wait counts in {@code compute_s}, as an emulated device's stretch does, and
 * a cancel ends it at once.
 */
public final class StandInTrainer implements Trainer {
    /** Keeps the JIT from discarding the walk over the inputs. */
    private volatile double sink;
    private final double roundS;

    public StandInTrainer() {
        this(0);
    }

    public StandInTrainer(double roundS) {
        if (!(roundS >= 0) || Double.isInfinite(roundS)) {
            throw new IllegalArgumentException("roundS must be a finite number >= 0, got " + roundS);
        }
        this.roundS = roundS;
    }

    @Override
    public TrainingResult train(TrainingTask task, BooleanSupplier cancelled) {
        long start = System.nanoTime();
        Shard shard = task.shard();
        int perSample = shard.n() == 0 ? 0 : shard.x().length / shard.n();
        double acc = 0;
        for (long epoch = 0; epoch < task.epochs(); epoch++) {
            for (int first = 0; first < shard.n(); first += (int) Math.min(task.batchSize(), Integer.MAX_VALUE)) {
                if (cancelled.getAsBoolean()) {
                    throw new CancellationException("cancelled");
                }
                int last = (int) Math.min(shard.n(), first + task.batchSize());
                float[] x = shard.x();
                for (int i = first * perSample; i < last * perSample; i++) {
                    acc += x[i];
                }
            }
        }
        sink = acc;
        long until = start + (long) (roundS * 1e9);
        while (System.nanoTime() < until) {
            if (cancelled.getAsBoolean()) {
                throw new CancellationException("cancelled");
            }
            try {
                Thread.sleep(Math.max(1, Math.min(20, (until - System.nanoTime()) / 1_000_000)));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new CancellationException("interrupted");
            }
        }
        float scale = (float) (1 - 1e-4 * task.lr());
        List<Tensor> out = new ArrayList<>(task.weights().size());
        for (Tensor w : task.weights()) {
            out.add(scaled(w, scale));
        }
        double computeS = (System.nanoTime() - start) / 1e9;
        return new TrainingResult(out, shard.n(), 0.0, computeS);
    }

    static Tensor scaled(Tensor w, float scale) {
        ByteBuffer src = w.data();
        ByteBuffer dst = ByteBuffer.allocate(w.nbytes()).order(ByteOrder.LITTLE_ENDIAN);
        int n = (int) w.numel();
        switch (w.dtype()) {
            case FLOAT32:
                for (int i = 0; i < n; i++) {
                    dst.putFloat(i * 4, src.getFloat(i * 4) * scale);
                }
                break;
            case FLOAT64:
                for (int i = 0; i < n; i++) {
                    dst.putDouble(i * 8, src.getDouble(i * 8) * (double) scale);
                }
                break;
            case FLOAT16:
                for (int i = 0; i < n; i++) {
                    dst.putShort(i * 2, Half.fromFloat(Half.toFloat(src.getShort(i * 2)) * scale));
                }
                break;
            default:
                dst.put(src);
                dst.clear();
        }
        return new Tensor(w.name(), w.dtype(), w.shape(), dst);
    }
}
