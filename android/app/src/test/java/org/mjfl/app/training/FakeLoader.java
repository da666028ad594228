package org.mjfl.app.training;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Loads {@link FakeProgram}s of one shape for any path, with the planned memory set per path,
 * and records what was read, loaded and is still open. {@link #phone} is a memory budget that
 * behaves like a phone's: what the open programs plan is gone from what is available.
 */
final class FakeLoader implements ProgramTrainer.Loader {
    final long[] sampleShape;
    final int classes;
    final int maxBatch;
    final boolean batchNorm;
    final List<long[]> noise;
    final Map<Path, Long> planned = new HashMap<>();
    /** Each path's file size (0 unless set). */
    final Map<Path, Long> fileBytes = new HashMap<>();
    final List<Path> reads = new ArrayList<>();
    final List<Path> loads = new ArrayList<>();
    final Map<Path, FakeProgram> byPath = new HashMap<>();
    final List<FakeProgram> all = new ArrayList<>();
    /** Runs as a program loads (to move a test clock). */
    Runnable onLoad = () -> {};
    /** Becomes each new program's {@link FakeProgram#onStep}. */
    Runnable onStep = () -> {};

    FakeLoader(long[] sampleShape, int classes, int maxBatch, boolean batchNorm, List<long[]> noise) {
        this.sampleShape = sampleShape.clone();
        this.classes = classes;
        this.maxBatch = maxBatch;
        this.batchNorm = batchNorm;
        this.noise = List.copyOf(noise);
    }

    @Override
    public ProgramSignature read(Path program) throws ProgramException {
        reads.add(program);
        return FakeProgram.signature(sampleShape, classes, maxBatch, batchNorm, noise, planned.getOrDefault(program, 0L));
    }

    @Override
    public long fileBytes(Path program) {
        return fileBytes.getOrDefault(program, 0L);
    }

    @Override
    public TrainingProgram load(Path program, ProgramSignature signature) {
        onLoad.run();
        loads.add(program);
        FakeProgram p = new FakeProgram(signature, classes, batchNorm);
        p.onStep = onStep;
        byPath.put(program, p);
        all.add(p);
        return p;
    }

    /** The planned bytes of the programs loaded and not closed. */
    long openPlanned() {
        long sum = 0;
        for (FakeProgram p : all) {
            if (!p.closed) {
                sum += p.signature.plannedBytes();
            }
        }
        return sum;
    }

    /** A phone's budget: {@code capacity} less what open programs plan. */
    MemoryBudget phone(long capacity) {
        return () -> capacity - openPlanned();
    }
}
