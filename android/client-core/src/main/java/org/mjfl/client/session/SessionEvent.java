package org.mjfl.client.session;

import org.mjfl.client.protocol.Message;

/** What {@link DeviceSession#receiveText} and {@link DeviceSession#receiveBinary} report. */
public sealed interface SessionEvent {
    /** The session is OPEN (5.2). */
    record Welcomed(Message.Welcome welcome) implements SessionEvent {}

    /**
     * A job is bound (5.3). The artifacts it carries have been verified against their sha256
     * and are views into the message: store what you need before the next message.
     */
    record Provisioned(Message.Provision provision, JobBinding job) implements SessionEvent {}

    /** A task to answer with a result or an error (5.4); it is pending until then. */
    record TaskArrived(Message.Task task, JobBinding job) implements SessionEvent {}

    /** The coordinator no longer needs a pending task; it still must be answered (5.6). */
    record CancelRequested(String taskId, String reason) implements SessionEvent {}

    /** One of our heartbeats came back (5.7); rtt on the caller's clock. */
    record HeartbeatAcked(long seq, double rttS) implements SessionEvent {}

    /** The coordinator reported a failure that does not end the session (5.8). */
    record PeerError(Message.ErrorMessage error) implements SessionEvent {}

    /**
     * The session is CLOSED: by a bye from the peer ({@code byPeer}), by our bye after a
     * violation, or with {@code code} null when the connection went without a bye.
     */
    record Closed(String code, String reason, boolean byPeer) implements SessionEvent {}
}
