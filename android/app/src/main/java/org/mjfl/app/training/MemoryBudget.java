package org.mjfl.app.training;

/**
 * How much memory the device can give a task now. ExecuTorch allocates a program's planned memory
 * ({@link ProgramSignature#plannedBytes()}) and reads its file when it loads it, and a task adds
 * its optimizer's buffers and Java copies ({@link MemoryNeed}), so {@link ProgramTrainer} asks
 * this before every task: one that cannot fit is refused before anything is loaded. On Android:
 * {@code org.mjfl.app.AndroidMemory}.
 */
@FunctionalInterface
public interface MemoryBudget {
    /** No limit: every program fits (a JVM with memory to spare, tests). */
    MemoryBudget UNLIMITED = () -> Long.MAX_VALUE;

    /**
     * Bytes that loading more programs may take now, safety margins already taken off; negative
     * when memory is already short. The loaded program is not in it: its memory is in use.
     */
    long availableBytes();

    /**
     * Bytes the Java heap can still grow by (its cap less what is in use): the task's Java copies
     * must fit there too, or the allocation fails with OutOfMemoryError whatever the phone has.
     * Not checked unless overridden.
     */
    default long heapBytes() {
        return Long.MAX_VALUE;
    }
}
