package org.mjfl.app;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.List;
import org.junit.jupiter.api.Test;
import org.mjfl.client.train.CannotTrainException;

class RuntimeLoadGuardTest {
    static final String DLOPEN = "dlopen failed: library \"libexecutorch.so\" not found";

    @Test
    void aRuntimeThatCannotLoadOnA32BitPhoneSaysWhichABIsTheAppShips() {
        RuntimeLoadGuard g = new RuntimeLoadGuard((task, c) -> {
            throw new UnsatisfiedLinkError(DLOPEN);
        }, List.of("armeabi-v7a", "armeabi"));
        CannotTrainException e = assertThrows(CannotTrainException.class, () -> g.train(Tasks.dueAt(1), () -> false));
        assertEquals("the ExecuTorch runtime cannot load on this phone (armeabi-v7a, armeabi): the app ships it for "
                + "arm64-v8a and x86_64 only (UnsatisfiedLinkError: " + DLOPEN + ")", e.getMessage());
        assertEquals(UnsatisfiedLinkError.class, e.getCause().getClass());
    }

    @Test
    void onAPhoneItShipsForTheReasonIsTheErrorItself() {
        // After a failed static initializer, later uses of the class throw NoClassDefFoundError.
        RuntimeLoadGuard g = new RuntimeLoadGuard((task, c) -> {
            throw new IllegalStateException("loading the program failed",
                    new NoClassDefFoundError("Could not initialize class org.pytorch.executorch.training.TrainingModule"));
        }, List.of("arm64-v8a", "armeabi-v7a", "armeabi"));
        CannotTrainException e = assertThrows(CannotTrainException.class, () -> g.train(Tasks.dueAt(1), () -> false));
        assertEquals("the ExecuTorch runtime cannot load on this phone (arm64-v8a, armeabi-v7a, armeabi): "
                + "NoClassDefFoundError: Could not initialize class org.pytorch.executorch.training.TrainingModule",
                e.getMessage());
    }

    @Test
    void otherFailuresPassThroughUnchanged() {
        IllegalStateException boom = new IllegalStateException("boom");
        RuntimeLoadGuard g = new RuntimeLoadGuard((task, c) -> {
            throw boom;
        }, List.of("arm64-v8a"));
        assertSame(boom, assertThrows(IllegalStateException.class, () -> g.train(Tasks.dueAt(1), () -> false)));
        RuntimeLoadGuard oom = new RuntimeLoadGuard((task, c) -> {
            throw new OutOfMemoryError();
        }, List.of("arm64-v8a"));
        assertThrows(OutOfMemoryError.class, () -> oom.train(Tasks.dueAt(1), () -> false));
    }
}
