package org.mjfl.app;

import android.util.Log;
import java.util.logging.Formatter;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.SimpleFormatter;

/**
 * Sends client-core's and the app's java.util.logging records to logcat under the tag
 * {@code MJFL}.
 */
final class LogcatHandler extends Handler {
    private final Formatter formatter = new SimpleFormatter();

    @Override
    public void publish(LogRecord r) {
        if (r == null || !isLoggable(r)) {
            return;
        }
        String message = formatter.formatMessage(r);
        Throwable t = r.getThrown();
        int level = r.getLevel().intValue();
        if (level >= Level.SEVERE.intValue()) {
            Log.e(MainActivity.TAG, message, t);
        } else if (level >= Level.WARNING.intValue()) {
            Log.w(MainActivity.TAG, message, t);
        } else if (level >= Level.INFO.intValue()) {
            Log.i(MainActivity.TAG, message, t);
        } else {
            Log.d(MainActivity.TAG, message, t);
        }
    }

    @Override
    public void flush() {}

    @Override
    public void close() {}
}
