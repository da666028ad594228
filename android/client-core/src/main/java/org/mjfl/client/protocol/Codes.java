package org.mjfl.client.protocol;

import java.util.regex.Pattern;

/** The codes of protocol v1: bye codes with their WebSocket close codes (section 8), error codes (5.8). */
public final class Codes {
    private Codes() {}

    // Bye codes, section 8.
    public static final String NORMAL = "normal";
    public static final String GOING_AWAY = "going_away";
    public static final String UNAUTHORIZED = "unauthorized";
    public static final String MESSAGE_TOO_BIG = "message_too_big";
    public static final String HEARTBEAT_TIMEOUT = "heartbeat_timeout";
    public static final String INTERNAL_ERROR = "internal_error";
    public static final String UNSUPPORTED_VERSION = "unsupported_version";
    public static final String BAD_MESSAGE = "bad_message";
    public static final String UNKNOWN_TYPE = "unknown_type";
    public static final String UNEXPECTED_MESSAGE = "unexpected_message";
    public static final String BAD_FRAME = "bad_frame";
    public static final String BAD_TENSOR_TABLE = "bad_tensor_table";
    public static final String BAD_WEIGHTS = "bad_weights";
    public static final String UNKNOWN_TASK = "unknown_task";
    public static final String UNKNOWN_JOB = "unknown_job";
    public static final String MISSING_ARTIFACT = "missing_artifact";
    public static final String BAD_ARTIFACT = "bad_artifact";

    // Error codes in use, section 5.8 (receivers accept any well-formed code).
    public static final String TASK_FAILED = "task_failed";
    public static final String DIVERGED = "diverged";
    public static final String CANCELLED = "cancelled";
    public static final String BUSY = "busy";

    private static final Pattern CODE = Pattern.compile("[a-z][a-z0-9_]{0,63}");

    /** Section 2: a code matches {@code [a-z][a-z0-9_]{0,63}}. */
    public static boolean isCode(String s) {
        return s != null && CODE.matcher(s).matches();
    }

    /** Section 8's close code for a bye code; any other code closes with 1002. */
    public static int closeCode(String code) {
        switch (code) {
            case NORMAL:
                return 1000;
            case GOING_AWAY:
                return 1001;
            case UNAUTHORIZED:
                return 1008;
            case MESSAGE_TOO_BIG:
                return 1009;
            case HEARTBEAT_TIMEOUT:
            case INTERNAL_ERROR:
                return 1011;
            default:
                return 1002;
        }
    }
}
