package org.mjfl.app;

import java.nio.file.Path;
import org.mjfl.app.training.ProgramException;
import org.mjfl.app.training.ProgramSignature;
import org.mjfl.app.training.ProgramTrainer;
import org.mjfl.app.training.TrainingProgram;

/**
 * The app's own ExecuTorch runtime ({@link ExecuTorchProgram}, what a phone's self-test loads
 * programs with) as a {@link ProgramTrainer.Loader} the JVM self-test can name:
 * {@code android/app/bin/mjfl-selftest --runtime org.mjfl.app.ExecuTorchRuntime}. Under it, this
 * source root's double of ExecuTorch runs the programs in ExecuTorch's Python runtime.
 */
public final class ExecuTorchRuntime implements ProgramTrainer.Loader {
    public ExecuTorchRuntime() {}

    @Override
    public TrainingProgram load(Path program, ProgramSignature signature) throws ProgramException {
        return ExecuTorchProgram.load(program, signature);
    }
}
