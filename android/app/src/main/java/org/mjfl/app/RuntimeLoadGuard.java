package org.mjfl.app;

import java.util.List;
import java.util.function.BooleanSupplier;
import org.mjfl.client.train.CannotTrainException;
import org.mjfl.client.train.Trainer;
import org.mjfl.client.train.TrainingResult;
import org.mjfl.client.train.TrainingTask;

/**
 * A {@link Trainer} that says, when the ExecuTorch runtime cannot load, why and on which phone:
 * a {@link LinkageError} (UnsatisfiedLinkError from {@code System.loadLibrary},
 * NoClassDefFoundError or ExceptionInInitializerError after it) becomes a
 * {@link CannotTrainException}, which client-core's {@code Device} answers with
 * {@code error task_failed} and this reason, then leaves (docs/phones.md, troubleshooting).
 */
final class RuntimeLoadGuard implements Trainer {
    /** The ABIs the ExecuTorch AAR ({@code org.pytorch:executorch-android}) ships native libraries for. */
    static final List<String> SHIPPED_ABIS = List.of("arm64-v8a", "x86_64");

    private final Trainer inner;
    private final List<String> abis;

    /** @param abis the phone's ABIs, preferred first ({@code Build.SUPPORTED_ABIS}) */
    RuntimeLoadGuard(Trainer inner, List<String> abis) {
        this.inner = inner;
        this.abis = List.copyOf(abis);
    }

    @Override
    public TrainingResult train(TrainingTask task, BooleanSupplier cancelled) throws Exception {
        try {
            return inner.train(task, cancelled);
        } catch (Exception | Error e) {
            LinkageError cause = linkageError(e);
            if (cause == null) {
                throw e;
            }
            throw new CannotTrainException(reason(cause, abis), e);
        }
    }

    /** e.g. "the ExecuTorch runtime cannot load on this phone (armeabi-v7a, armeabi): the app ships it for arm64-v8a and x86_64 only (UnsatisfiedLinkError: ...)". */
    static String reason(LinkageError e, List<String> abis) {
        String what = e.getClass().getSimpleName() + ": " + e.getMessage();
        String phone = abis.isEmpty() ? "ABI unknown" : String.join(", ", abis);
        boolean shipped = abis.stream().anyMatch(SHIPPED_ABIS::contains);
        return "the ExecuTorch runtime cannot load on this phone (" + phone + "): "
                + (shipped ? what : "the app ships it for " + String.join(" and ", SHIPPED_ABIS) + " only (" + what + ")");
    }

    private static LinkageError linkageError(Throwable e) {
        Throwable x = e;
        for (int depth = 0; x != null && depth < 16; depth++, x = x.getCause()) { // bounded: causes may cycle
            if (x instanceof LinkageError) {
                return (LinkageError) x;
            }
        }
        return null;
    }
}
