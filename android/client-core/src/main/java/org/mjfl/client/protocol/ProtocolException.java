package org.mjfl.client.protocol;

/**
 * A message the receiver must refuse (protocol.md section 8): the bye code and a reason that
 * describes what was wrong with the message. Decoding throws this and nothing else, whatever the
 * bytes; encoding throws it for a message the receiver would refuse with that code.
 *
 * <p>A bug of our own while decoding surfaces as {@code internal_error} with the reason
 * "internal error" and the cause attached for the log, never sent to the peer.
 */
public final class ProtocolException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final String code;
    private final String reason;

    public ProtocolException(String code, String reason) {
        this(code, reason, null);
    }

    public ProtocolException(String code, String reason, Throwable cause) {
        super(code + ": " + reason, cause);
        this.code = code;
        this.reason = reason;
    }

    /** The bye code of section 8, e.g. {@code bad_message}. */
    public String code() {
        return code;
    }

    /** For humans; at most 1024 characters (section 2). */
    public String reason() {
        return reason;
    }

    /** The WebSocket close code that goes with {@link #code()} (section 8). */
    public int closeCode() {
        return Codes.closeCode(code);
    }

    static ProtocolException badMessage(String reason) {
        return new ProtocolException(Codes.BAD_MESSAGE, reason);
    }
}
