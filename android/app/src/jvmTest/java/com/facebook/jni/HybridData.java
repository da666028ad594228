package com.facebook.jni;

/**
 * Test double of fbjni's {@code HybridData}, the handle by which an ExecuTorch Java object owns
 * its native part: here a runnable that frees the Python runtime's object. Kept because the app
 * frees an optimizer through it ({@code ExecuTorchProgram.release}: the SGD's private
 * {@code mHybridData}, then {@code resetNative()}), as on a phone.
 */
public class HybridData {
    private Runnable destructor;

    public HybridData(Runnable destructor) {
        this.destructor = destructor;
    }

    /** Frees the native part now; later calls do nothing. */
    public synchronized void resetNative() {
        Runnable d = destructor;
        destructor = null;
        if (d != null) {
            d.run();
        }
    }

    public synchronized boolean isValid() {
        return destructor != null;
    }
}
