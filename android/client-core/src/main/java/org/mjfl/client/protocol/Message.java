package org.mjfl.client.protocol;

import com.google.gson.JsonObject;
import java.util.List;
import java.util.stream.Collectors;

/**
 * The ten messages of protocol v1 (section 5), as plain data. Ints are {@code long}, numbers
 * {@code double}; fields that may be null ("or null") are boxed. {@link Codec} reads and writes
 * them and is where every rule is checked.
 */
public sealed interface Message {
    /** The wire {@code type}. */
    String type();

    /** Messages that travel as binary WebSocket messages (section 3). */
    sealed interface Binary extends Message {
        List<Tensor> tensors();
    }

    /** 5.1; {@code hardware} is free-form, {@code maxMessageBytes} may be null. */
    record Hello(String deviceId, String token, String runtime, List<Integer> versions, JsonObject hardware,
            List<String> cached, Long maxMessageBytes, String proof) implements Message {
        public Hello {
            versions = List.copyOf(versions);
            cached = List.copyOf(cached);
        }

        /** A hello without a proof (the shared-token path, or an open lab). */
        public Hello(String deviceId, String token, String runtime, List<Integer> versions, JsonObject hardware,
                List<String> cached, Long maxMessageBytes) {
            this(deviceId, token, runtime, versions, hardware, cached, maxMessageBytes, null);
        }

        /** This hello with {@code proof} (5.1.1), or none. */
        public Hello withProof(String p) {
            return new Hello(deviceId, token, runtime, versions, hardware, cached, maxMessageBytes, p);
        }

        public String type() {
            return "hello";
        }
    }

    /** 5.2. */
    record Welcome(int version, String coordinatorId, Settings settings) implements Message {
        public String type() {
            return "welcome";
        }
    }

    /** 5.2's settings; every value may be null = off. */
    record Settings(Double heartbeatIntervalS, Double heartbeatTimeoutS, Long maxMessageBytes, Long maxControlBytes) {}

    /** 5.3's model spec. */
    /**
     * 5.3's {@code model}. {@code batchNormPixels}: per batch-norm layer of the program, in output
     * order, the pixels per channel it normalises; {@code dropoutShapes}: the per-sample shape of
     * each dropout noise input, in input order (both empty when the model has none; docs/models.md,
     * "Training a task on a device").
     */
    record ModelSpec(String name, List<Long> inputShape, long numClasses, List<Long> batchNormPixels,
            List<List<Long>> dropoutShapes) {
        public ModelSpec {
            inputShape = List.copyOf(inputShape);
            batchNormPixels = List.copyOf(batchNormPixels);
            // Not Stream.toList(): a Java 16 API that Android has only from API 34.
            dropoutShapes = List.copyOf(dropoutShapes.stream().map(List::copyOf).collect(Collectors.toList()));
        }

        /** A model without batch norm or dropout. */
        public ModelSpec(String name, List<Long> inputShape, long numClasses) {
            this(name, inputShape, numClasses, List.of(), List.of());
        }

        /** Values in one sample: product(input_shape). */
        public long sampleSize() {
            long n = 1;
            for (long d : inputShape) {
                n = Math.multiplyExact(n, d);
            }
            return n;
        }
    }

    /** 5.3; tensors are a subset of {@code program}, {@code x}, {@code y}. */
    record Provision(String jobId, ModelSpec model, String programSha256, String shardSha256, List<Tensor> tensors)
            implements Binary {
        public Provision {
            tensors = List.copyOf(tensors);
        }

        public String type() {
            return "provision";
        }

        /** The tensor of that name, or null. */
        public Tensor tensor(String name) {
            for (Tensor t : tensors) {
                if (t.name().equals(name)) {
                    return t;
                }
            }
            return null;
        }
    }

    /**
     * 5.4; tensors are the global weights in state-dict order. {@code seed} (0 to 2^63 - 1) is
     * the task generator's (docs/models.md): batch order and dropout noise; null when the
     * coordinator sends none (an older one), and the device then draws its own.
     */
    record Task(String taskId, String jobId, long round, long epochs, long batchSize, double lr, double momentum,
            double weightDecay, Double deadlineS, String programSha256, String shardSha256, Long seed,
            List<Tensor> tensors) implements Binary {
        public Task {
            tensors = List.copyOf(tensors);
        }

        /** A task without a seed. */
        public Task(String taskId, String jobId, long round, long epochs, long batchSize, double lr, double momentum,
                double weightDecay, Double deadlineS, String programSha256, String shardSha256, List<Tensor> tensors) {
            this(taskId, jobId, round, epochs, batchSize, lr, momentum, weightDecay, deadlineS, programSha256,
                    shardSha256, null, tensors);
        }

        public String type() {
            return "task";
        }
    }

    /** 5.5's timing, seconds on the device's monotonic clock; uploadS null for a session's first result. */
    record Timing(double downloadS, double computeS, Double uploadS) {}

    /**
     * 5.5. {@code extraFields} are written after {@code timing} (receivers ignore fields they do
     * not know, section 12): where a device adds its own facts (battery, thermal); may be null.
     */
    record Result(String taskId, String jobId, long round, long samples, double meanLoss, Timing timing,
            JsonObject extraFields, List<Tensor> tensors) implements Binary {
        public Result {
            tensors = List.copyOf(tensors);
        }

        public String type() {
            return "result";
        }
    }

    /** 5.6. */
    record Cancel(String taskId, String reason) implements Message {
        public String type() {
            return "cancel";
        }
    }

    /** 5.7. */
    record Heartbeat(long seq, double sentAt) implements Message {
        public String type() {
            return "heartbeat";
        }
    }

    /** 5.7. */
    record HeartbeatAck(long seq, double echo) implements Message {
        public String type() {
            return "heartbeat_ack";
        }
    }

    /** 5.8; taskId may be null. */
    record ErrorMessage(String code, String reason, String taskId) implements Message {
        public String type() {
            return "error";
        }
    }

    /** 5.9. */
    record Bye(String code, String reason) implements Message {
        public String type() {
            return "bye";
        }
    }
}
