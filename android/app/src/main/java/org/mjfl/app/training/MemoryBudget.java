package org.mjfl.app.training;

/**
 * How much memory the device can give training programs now. ExecuTorch allocates a program's
 * planned memory ({@link ProgramSignature#plannedBytes()}) when it loads it, so
 * {@link ProgramTrainer} asks this before loading one: a program that cannot fit is refused
 * before anything is loaded, and programs kept from earlier tasks stay loaded only while they
 * leave room. On Android: {@code org.mjfl.app.AndroidMemory}.
 */
@FunctionalInterface
public interface MemoryBudget {
    /** No limit: every program fits (a JVM with memory to spare, tests). */
    MemoryBudget UNLIMITED = () -> Long.MAX_VALUE;

    /**
     * Bytes that loading more programs may take now, safety margins already taken off; negative
     * when memory is already short. Programs already loaded are not in it: their memory is in use.
     */
    long availableBytes();
}
