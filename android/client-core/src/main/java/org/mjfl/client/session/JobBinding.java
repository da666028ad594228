package org.mjfl.client.session;

import org.mjfl.client.protocol.Message;

/** What a provision binds a job to for the rest of the session (5.3). */
public record JobBinding(String jobId, Message.ModelSpec model, String programSha256, String shardSha256) {}
