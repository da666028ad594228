package org.mjfl.app.selftest;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.mjfl.app.training.Batch;
import org.mjfl.app.training.ProgramException;
import org.mjfl.app.training.ProgramSignature;
import org.mjfl.app.training.ProgramTrainer;
import org.mjfl.app.training.TrainingProgram;
import org.mjfl.client.net.Clock;

/**
 * A runtime's loader that times every training step and keeps the planned memory of what it
 * read: the trainer stays as it is in a run, the self-test only looks at the runtime's calls.
 */
final class TimedLoader implements ProgramTrainer.Loader {
    private final ProgramTrainer.Loader runtime;
    private final Clock clock;
    private final List<Double> stepSeconds = new ArrayList<>();
    private long plannedBytes = -1;

    TimedLoader(ProgramTrainer.Loader runtime, Clock clock) {
        this.runtime = runtime;
        this.clock = clock;
    }

    /** Every step's seconds (forward, backward and the optimizer's step), in order. */
    List<Double> stepSeconds() {
        return List.copyOf(stepSeconds);
    }

    /** The planned memory of the last program read, -1 before any. */
    long plannedBytes() {
        return plannedBytes;
    }

    @Override
    public ProgramSignature read(Path program) throws java.io.IOException, ProgramException {
        ProgramSignature s = runtime.read(program);
        plannedBytes = s.plannedBytes();
        return s;
    }

    @Override
    public TrainingProgram load(Path program, ProgramSignature signature) throws Exception {
        TrainingProgram p = runtime.load(program, signature);
        return new TrainingProgram() {
            @Override
            public ProgramSignature signature() {
                return p.signature();
            }

            @Override
            public TaskRun start(Map<String, float[]> parameters, double lr, double momentum, double weightDecay)
                    throws Exception {
                TaskRun run = p.start(parameters, lr, momentum, weightDecay);
                return new TaskRun() {
                    @Override
                    public StepOutputs step(Batch batch) throws Exception {
                        double t0 = clock.now();
                        StepOutputs out = run.step(batch);
                        stepSeconds.add(clock.now() - t0);
                        return out;
                    }

                    @Override
                    public float[] parameter(String programName) throws Exception {
                        return run.parameter(programName);
                    }

                    @Override
                    public void close() {
                        run.close();
                    }
                };
            }

            @Override
            public void close() {
                p.close();
            }
        };
    }
}
