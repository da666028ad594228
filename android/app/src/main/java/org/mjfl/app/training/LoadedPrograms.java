package org.mjfl.app.training;

import java.nio.file.Path;
import java.util.Locale;
import org.mjfl.client.train.TrainingTask;

/**
 * The one training program a device keeps loaded between tasks (docs/models.md): the last one
 * used. A task of another program closes it, then loads its own. Before every task its whole
 * {@link MemoryNeed} (the program's planned memory and file when it is not loaded yet, the
 * optimizer's momentum buffers, the Java copies of the weights and of a batch) is checked against
 * the {@link MemoryBudget}; a task that does not fit is refused with its figures before anything
 * is closed or loaded. One thread at a time.
 */
final class LoadedPrograms implements AutoCloseable {
    private final ProgramTrainer.Loader loader;
    private final MemoryBudget memory;
    private Path path;
    private TrainingProgram program;
    private long programBytes; // the loaded program's planned memory and file: freed when it closes

    LoadedPrograms(ProgramTrainer.Loader loader, MemoryBudget memory) {
        this.loader = loader;
        this.memory = memory;
    }

    /**
     * The loaded program of {@code task}, loading it (and closing the other) if need be.
     *
     * @throws ProgramException when the task cannot fit the memory the phone has, or its file is
     *     not a training program
     */
    TrainingProgram get(TrainingTask task) throws Exception {
        Path p = task.program();
        boolean loaded = program != null && p.equals(path);
        ProgramSignature sig = loaded ? program.signature() : loader.read(p);
        long file = loaded ? 0 : loader.fileBytes(p);
        MemoryNeed need = MemoryNeed.of(sig, loaded, file, task);
        // Another program's memory counts as available: it is closed before this one loads.
        long room = MemoryNeed.add(memory.availableBytes(), program != null && !loaded ? programBytes : 0);
        if (need.total() > room) {
            throw new ProgramException(String.format(Locale.ROOT, "task needs %d MB (%s); the phone has %d MB available",
                    MemoryNeed.up(need.total()), need.parts(), MemoryNeed.down(room)));
        }
        long heap = memory.heapBytes();
        if (need.javaBytes() > heap) {
            throw new ProgramException(String.format(Locale.ROOT,
                    "task needs %d MB of Java heap for its weights and batches; the app's heap has %d MB free",
                    MemoryNeed.up(need.javaBytes()), MemoryNeed.down(heap)));
        }
        if (!loaded) {
            close();
            program = loader.load(p, sig);
            path = p;
            programBytes = MemoryNeed.add(need.plannedBytes(), need.programBytes());
        }
        return program;
    }

    boolean loaded(Path p) {
        return program != null && p.equals(path);
    }

    @Override
    public void close() {
        if (program != null) {
            TrainingProgram p = program;
            program = null;
            path = null;
            programBytes = 0;
            p.close();
        }
    }
}
