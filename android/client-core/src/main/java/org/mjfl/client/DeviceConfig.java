package org.mjfl.client;

import java.util.Objects;
import java.util.Random;
import org.mjfl.client.cache.ArtifactCache;
import org.mjfl.client.net.Backoff;
import org.mjfl.client.net.Clock;
import org.mjfl.client.net.Connection;
import org.mjfl.client.train.Trainer;

/**
 * Everything one {@link Device} needs; build with {@link #builder}.
 *
 * @param runtime the hello's runtime: {@code executorch} (runs the task's .pte) or {@code torch}
 * @param maxMessageBytes the largest binary message the device accepts, announced in the hello
 * @param maxControlBytes the largest text message or JSON header the device accepts (its own limit)
 * @param stopOnCoordinatorBye stop, rather than reconnect, on the coordinator's bye
 *     {@code going_away} or {@code normal} (its shutdown, or a newer connection with our id)
 */
public record DeviceConfig(String url, String deviceId, String token, String runtime, Trainer trainer,
        ArtifactCache cache, DeviceFacts facts, Backoff backoff, boolean stopOnCoordinatorBye, Clock clock,
        Connection.Options options, Long maxMessageBytes, Long maxControlBytes, String secret) {

    public DeviceConfig {
        Objects.requireNonNull(url, "url");
        Objects.requireNonNull(deviceId, "deviceId");
        Objects.requireNonNull(trainer, "trainer");
        Objects.requireNonNull(cache, "cache");
    }

    public static Builder builder(String url, String deviceId, Trainer trainer, ArtifactCache cache) {
        return new Builder(url, deviceId, trainer, cache);
    }

    /** Defaults: no token, executorch, JVM facts, default backoff, stop on the coordinator's bye, 256 MiB / 64 KiB. */
    public static final class Builder {
        private final String url;
        private final String deviceId;
        private final Trainer trainer;
        private final ArtifactCache cache;
        private String token = "";
        private String secret;
        private String runtime = "executorch";
        private DeviceFacts facts = new JvmFacts();
        private Backoff backoff = Backoff.defaults(new Random());
        private boolean stopOnCoordinatorBye = true;
        private Clock clock = Clock.SYSTEM;
        private Connection.Options options = Connection.Options.DEFAULTS;
        private Long maxMessageBytes = 256L << 20;
        private Long maxControlBytes = 64L << 10;

        private Builder(String url, String deviceId, Trainer trainer, ArtifactCache cache) {
            this.url = url;
            this.deviceId = deviceId;
            this.trainer = trainer;
            this.cache = cache;
        }

        public Builder token(String v) {
            token = v;
            return this;
        }

        /** The enrolled secret, proved in every hello (protocol.md 5.1.1); null for none. */
        public Builder secret(String v) {
            secret = v;
            return this;
        }

        public Builder runtime(String v) {
            runtime = v;
            return this;
        }

        public Builder facts(DeviceFacts v) {
            facts = v;
            return this;
        }

        public Builder backoff(Backoff v) {
            backoff = v;
            return this;
        }

        public Builder stopOnCoordinatorBye(boolean v) {
            stopOnCoordinatorBye = v;
            return this;
        }

        public Builder clock(Clock v) {
            clock = v;
            return this;
        }

        public Builder options(Connection.Options v) {
            options = v;
            return this;
        }

        public Builder maxMessageBytes(Long v) {
            maxMessageBytes = v;
            return this;
        }

        public Builder maxControlBytes(Long v) {
            maxControlBytes = v;
            return this;
        }

        public DeviceConfig build() {
            return new DeviceConfig(url, deviceId, token, runtime, trainer, cache, facts, backoff,
                    stopOnCoordinatorBye, clock, options, maxMessageBytes, maxControlBytes, secret);
        }
    }
}
