package org.mjfl.app;

import java.util.Optional;

/**
 * The connection state, read from client-core's {@code Device} log lines (it has no listener):
 * "ID: welcomed by C", "ID: session ended: ...", "ID: reconnecting in S s". A line it does not
 * know leaves the state as it was.
 */
final class ConnectionLog {
    private ConnectionLog() {}

    static Optional<String> state(String message) {
        if (message == null) {
            return Optional.empty();
        }
        String m = message;
        int at;
        if ((at = m.indexOf(": welcomed by ")) >= 0) {
            return Optional.of("connected to " + m.substring(at + ": welcomed by ".length()));
        }
        if ((at = m.indexOf(": session ended: ")) >= 0) {
            return Optional.of("disconnected: " + m.substring(at + ": session ended: ".length()));
        }
        if ((at = m.indexOf(": reconnecting in ")) >= 0) {
            return Optional.of("reconnecting in " + m.substring(at + ": reconnecting in ".length()));
        }
        return Optional.empty();
    }
}
