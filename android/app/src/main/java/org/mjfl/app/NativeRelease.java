package org.mjfl.app;

import java.lang.reflect.Field;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * Frees the native part of an fbjni hybrid object now: {@code HybridData.resetNative()} on its
 * {@code mHybridData}, the field fbjni's C++ side finds every hybrid object's native part by (so
 * its name is fixed). ExecuTorch's {@code SGD} has no {@code close()}: without this, its momentum
 * buffers wait for the garbage collector, which native memory alone never prompts.
 */
final class NativeRelease {
    private NativeRelease() {}

    /**
     * @param type the class that declares {@code mHybridData} ({@code owner}'s, or a superclass)
     * @param what what is freed, for the log: "the optimizer's native memory"
     * @return false when it cannot be reached (another runtime build): logged at WARNING, the
     *     level the app's logcat handler keeps, since the memory then leaks until a collection
     */
    static boolean resetNative(Object owner, Class<?> type, String what, Logger log) {
        try {
            Field f = type.getDeclaredField("mHybridData");
            f.setAccessible(true);
            Object hybrid = f.get(owner);
            hybrid.getClass().getMethod("resetNative").invoke(hybrid);
            return true;
        } catch (ReflectiveOperationException | RuntimeException e) {
            log.log(Level.WARNING, "cannot free " + what + " now (" + e + "): it stays allocated until the garbage"
                    + " collector frees it, every task adding to it until then");
            return false;
        }
    }
}
