package org.mjfl.app;

import java.util.Locale;
import java.util.concurrent.CancellationException;
import java.util.function.BooleanSupplier;
import java.util.logging.Level;
import java.util.logging.Logger;
import org.mjfl.client.train.Trainer;
import org.mjfl.client.train.TrainingResult;
import org.mjfl.client.train.TrainingTask;

/** A {@link Trainer} that tells the {@link StatusBoard} (and the log) what the trainer inside does. */
public final class ReportingTrainer implements Trainer {
    private static final Logger LOG = Logger.getLogger(ReportingTrainer.class.getName());

    private final Trainer inner;
    private final StatusBoard board;

    public ReportingTrainer(Trainer inner, StatusBoard board) {
        this.inner = inner;
        this.board = board;
    }

    @Override
    public TrainingResult train(TrainingTask task, BooleanSupplier cancelled) throws Exception {
        String what = describe(task);
        board.task(what);
        LOG.info("training " + what + String.format(Locale.ROOT, ": %d epochs, batch %d, lr %g, momentum %g, "
                + "weight decay %g, seed %d", task.epochs(), task.batchSize(), task.lr(), task.momentum(),
                task.weightDecay(), task.seed()));
        try {
            TrainingResult r = inner.train(task, cancelled);
            String answer = what + ": " + summary(r);
            LOG.info("trained " + answer);
            board.answered(answer);
            return r;
        } catch (CancellationException e) {
            board.answered(what + ": cancelled");
            LOG.info("cancelled " + what);
            throw e;
        } catch (Exception | Error e) {
            board.answered(what + ": failed (" + e + ")");
            LOG.log(Level.WARNING, "training " + what + " failed", e);
            throw e;
        }
    }

    static String describe(TrainingTask task) {
        return task.jobId() + " round " + task.round() + " (" + task.taskId() + ")";
    }

    /** "loss 0.6931 over 600 samples, 12.35 s" ("diverged" for a loss that is not finite). */
    static String summary(TrainingResult r) {
        String loss = Double.isFinite(r.meanLoss())
                ? String.format(Locale.ROOT, "loss %.4f", r.meanLoss())
                : "diverged (loss " + r.meanLoss() + ")";
        return String.format(Locale.ROOT, "%s over %d samples, %.2f s", loss, r.samples(), r.computeS());
    }
}
