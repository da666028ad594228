package org.mjfl.app.training;

import java.util.Locale;
import org.mjfl.client.protocol.Tensor;
import org.mjfl.client.train.TrainingTask;

/**
 * What one task takes in memory while it trains, part by part (docs/models.md, "Memory"). The
 * native parts come out of the phone's memory ({@link MemoryBudget#availableBytes()}); the Java
 * copies out of the app's Java heap as well ({@link MemoryBudget#heapBytes()}).
 *
 * @param plannedBytes the program's planned memory, allocated when it loads (0 when it is loaded)
 * @param programBytes the {@code .pte} file, read into memory with its constants (0 when loaded)
 * @param momentumBytes SGD's momentum buffers: a float32 copy of the program's parameters when
 *     the task's momentum is not 0, allocated at the first step, freed with the task's optimizer
 * @param weightCopyBytes the task's weights as Java floats three times over: the copies written
 *     into the program, the trained values read back, and the result's tensors
 * @param batchBytes one batch in Java (x float32, y int64) and again as the runtime's input tensors
 */
record MemoryNeed(long plannedBytes, long programBytes, long momentumBytes, long weightCopyBytes, long batchBytes) {
    private static final long MB = 1L << 20;

    /**
     * @param loaded whether {@code sig}'s program is loaded already (its memory is then in use)
     * @param fileBytes the program file's size
     */
    static MemoryNeed of(ProgramSignature sig, boolean loaded, long fileBytes, TrainingTask task) {
        long parameters = 0;
        for (long[] shape : sig.parameterShapes()) {
            parameters = add(parameters, Tensor.numel(shape));
        }
        long weights = 0;
        for (Tensor t : task.weights()) {
            weights = add(weights, t.numel());
        }
        long sample = Tensor.numel(sig.sampleShape());
        long batch = Math.max(1, Math.min(task.batchSize(), sig.maxBatch()));
        long batchBytes = 2 * add(times(batch, times(sample, 4)), times(batch, 8));
        return new MemoryNeed(loaded ? 0 : sig.plannedBytes(), loaded ? 0 : fileBytes,
                task.momentum() != 0 ? times(parameters, 4) : 0, times(3, times(weights, 4)), batchBytes);
    }

    /** Every part: what the phone must have available. */
    long total() {
        return add(add(add(plannedBytes, programBytes), add(momentumBytes, weightCopyBytes)), batchBytes);
    }

    /** The parts on the Java heap. */
    long javaBytes() {
        return add(weightCopyBytes, batchBytes / 2);
    }

    /** "planned 173 MB + program 3 MB + momentum 5 MB + weights 15 MB + batches 1 MB", parts above 0 only. */
    String parts() {
        StringBuilder b = new StringBuilder();
        part(b, "planned", plannedBytes);
        part(b, "program", programBytes);
        part(b, "momentum", momentumBytes);
        part(b, "weights", weightCopyBytes);
        part(b, "batches", batchBytes);
        return b.toString();
    }

    private static void part(StringBuilder b, String name, long bytes) {
        if (bytes > 0) {
            b.append(b.length() == 0 ? "" : " + ").append(name).append(' ').append(up(bytes)).append(" MB");
        }
    }

    /** Rounded up: a need never reads smaller than it is. */
    static long up(long bytes) {
        return -Math.floorDiv(-bytes, MB);
    }

    /** Rounded down: room never reads larger than it is. */
    static long down(long bytes) {
        return Math.floorDiv(Math.max(0, bytes), MB);
    }

    static String format(String what, long need, long room, String where) {
        return String.format(Locale.ROOT, "%s needs %d MB; %s %d MB available", what, up(need), where, down(room));
    }

    static long add(long a, long b) {
        long s = a + b;
        // Overflow only when both have the same sign and the sum's differs.
        if (((a ^ s) & (b ^ s)) < 0) {
            return a < 0 ? Long.MIN_VALUE : Long.MAX_VALUE;
        }
        return s;
    }

    /** Saturates at Long.MAX_VALUE (the figures are sizes: never negative). */
    private static long times(long a, long b) {
        try {
            return Math.multiplyExact(a, b);
        } catch (ArithmeticException e) {
            return Long.MAX_VALUE;
        }
    }
}
