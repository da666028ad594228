package org.mjfl.client;

import java.time.LocalTime;
import java.time.format.DateTimeFormatter;
import java.util.logging.ConsoleHandler;
import java.util.logging.Formatter;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;

/** One line per log record on stderr, for the launcher (the library only logs through java.util.logging). */
final class Logs {
    private Logs() {}

    private static final DateTimeFormatter TIME = DateTimeFormatter.ofPattern("HH:mm:ss.SSS");

    static void setUp(boolean verbose) {
        Logger root = Logger.getLogger("");
        for (java.util.logging.Handler h : root.getHandlers()) {
            root.removeHandler(h);
        }
        ConsoleHandler h = new ConsoleHandler();
        h.setLevel(Level.ALL);
        h.setFormatter(new Formatter() {
            @Override
            public String format(LogRecord r) {
                StringBuilder sb = new StringBuilder()
                        .append(LocalTime.now().format(TIME)).append(' ')
                        .append(r.getLevel() == Level.INFO ? "" : r.getLevel() + " ")
                        .append(formatMessage(r)).append('\n');
                if (r.getThrown() != null) {
                    sb.append("  ").append(r.getThrown()).append('\n');
                }
                return sb.toString();
            }
        });
        root.addHandler(h);
        root.setLevel(Level.INFO);
        Logger.getLogger("org.mjfl.client").setLevel(verbose ? Level.FINE : Level.INFO);
        Logger.getLogger("okhttp3").setLevel(Level.WARNING);
    }
}
