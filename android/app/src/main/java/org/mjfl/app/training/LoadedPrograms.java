package org.mjfl.app.training;

import java.nio.file.Path;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;

/**
 * The training programs a device keeps loaded between tasks: the one in use, and others used
 * before only while their planned memory leaves room ({@link MemoryBudget}), at most
 * {@link #MAX_PROGRAMS}; least recently used out first, closed as they go. A program whose
 * planned memory does not fit even once the others are closed is refused before it is loaded.
 * One thread at a time.
 */
final class LoadedPrograms implements AutoCloseable {
    /** A cap beside memory: a device rarely serves more jobs at once, and each holds a file open. */
    static final int MAX_PROGRAMS = 4;
    private static final long MB = 1L << 20;

    private final ProgramTrainer.Loader loader;
    private final MemoryBudget memory;
    private final Map<Path, Loaded> programs = new LinkedHashMap<>(8, 0.75f, true); // access order: LRU first

    private record Loaded(TrainingProgram program, long plannedBytes) {}

    LoadedPrograms(ProgramTrainer.Loader loader, MemoryBudget memory) {
        this.loader = loader;
        this.memory = memory;
    }

    /**
     * The loaded program of {@code path}, loading it if need be (and closing others to make room).
     *
     * @throws ProgramException when its planned memory cannot fit, or its file is not a training program
     */
    TrainingProgram get(Path path) throws Exception {
        Loaded known = programs.get(path);
        if (known != null) {
            return known.program;
        }
        ProgramSignature signature = loader.read(path);
        long need = signature.plannedBytes();
        long room = memory.availableBytes();
        long held = 0;
        for (Loaded l : programs.values()) {
            held = saturatedAdd(held, l.plannedBytes);
        }
        long most = saturatedAdd(room, held);
        if (need > most) {
            // Rounded so that the figures never read equal: need up, room down.
            throw new ProgramException(String.format(Locale.ROOT,
                    "program needs %d MB of planned memory; the phone has %d MB available",
                    ceilDiv(need, MB), Math.floorDiv(Math.max(0, most), MB)));
        }
        while (!programs.isEmpty() && (need > room || programs.size() >= MAX_PROGRAMS)) {
            room = saturatedAdd(room, closeEldest());
        }
        TrainingProgram p = loader.load(path, signature);
        programs.put(path, new Loaded(p, need));
        return p;
    }

    /** After a task: closes programs other than the last one used while memory is short. */
    void trim() {
        long room = memory.availableBytes();
        while (programs.size() > 1 && room < 0) {
            room = saturatedAdd(room, closeEldest());
        }
    }

    int size() {
        return programs.size();
    }

    /** Closes the least recently used program; returns its planned bytes. */
    private long closeEldest() {
        Iterator<Loaded> it = programs.values().iterator();
        Loaded eldest = it.next();
        it.remove();
        eldest.program.close();
        return eldest.plannedBytes;
    }

    @Override
    public void close() {
        for (Loaded l : programs.values()) {
            l.program.close();
        }
        programs.clear();
    }

    private static long saturatedAdd(long a, long b) {
        long s = a + b;
        // Overflow only when both have the same sign and the sum's differs.
        if (((a ^ s) & (b ^ s)) < 0) {
            return a < 0 ? Long.MIN_VALUE : Long.MAX_VALUE;
        }
        return s;
    }

    private static long ceilDiv(long a, long b) {
        return -Math.floorDiv(-a, b);
    }
}
