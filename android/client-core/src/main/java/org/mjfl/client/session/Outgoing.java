package org.mjfl.client.session;

import java.nio.ByteBuffer;

/**
 * One whole protocol message for the writer to send, in order. A {@code RESULT} is binary and
 * asks the writer to time its upload (5.5 {@code upload_s}); after a {@code BYE} nothing is sent.
 */
public record Outgoing(Kind kind, String text, ByteBuffer binary) {
    public enum Kind { TEXT, BYE, BINARY, RESULT }

    static Outgoing text(String text) {
        return new Outgoing(Kind.TEXT, text, null);
    }

    public boolean isText() {
        return text != null;
    }
}
