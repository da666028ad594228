package org.mjfl.client;

import com.google.gson.JsonObject;
import org.mjfl.client.protocol.Message;

/**
 * What a device says about itself: the hello's free-form {@code hardware} (protocol.md 5.1) and
 * optional extra fields in each result. The Android app supplies its own (battery, thermal).
 */
public interface DeviceFacts {
    /** The hello's {@code hardware} object: {@code model}, {@code cores}, {@code ram_mb}, {@code os}, ... */
    JsonObject hardware();

    /**
     * Extra JSON header fields for the result of {@code task}, or null. Receivers ignore fields
     * they do not know (sections 2, 12); the names must not be the result's own fields.
     */
    default JsonObject resultExtras(Message.Task task) {
        return null;
    }
}
