package org.mjfl.app.selftest;

import java.nio.file.Path;
import org.mjfl.app.training.ProgramSignature;
import org.mjfl.app.training.ProgramTrainer;
import org.mjfl.app.training.TrainingProgram;

/**
 * A runtime that reads programs (their signature and planned memory, from the file, as the app
 * does) and loads none: on the JVM, where no ExecuTorch is, it shows that the zoo's golden cases
 * as Python writes them decode and read, up to the training itself
 * (tests/android_bridge/devices/test_golden.py).
 */
public final class NoRuntime implements ProgramTrainer.Loader {
    public NoRuntime() {}

    @Override
    public TrainingProgram load(Path program, ProgramSignature signature) {
        throw new UnsupportedOperationException("no ExecuTorch runtime on the JVM");
    }
}
