package org.mjfl.client.session;

import com.google.gson.JsonObject;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.mjfl.client.protocol.Codec;
import org.mjfl.client.protocol.DType;
import org.mjfl.client.protocol.Frames;
import org.mjfl.client.protocol.Message;
import org.mjfl.client.protocol.Tensor;

/** A small job for tests: model [1, 2, 2] with 3 classes, a 3-sample shard, a fake program. */
public final class Fixture {
    private Fixture() {}

    public static final Message.ModelSpec MODEL = new Message.ModelSpec("m", List.of(1L, 2L, 2L), 3);
    public static final byte[] PROGRAM = "not a real .pte program".getBytes(StandardCharsets.US_ASCII);
    public static final float[] X = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    public static final long[] Y = {0, 2, 1};
    public static final byte[] X_BYTES = Frames.f32(X);
    public static final byte[] Y_BYTES = Frames.i64(Y);
    public static final String PROGRAM_SHA = Frames.sha(PROGRAM);
    public static final String SHARD_SHA = Frames.sha(concat(X_BYTES, Y_BYTES));

    public static byte[] concat(byte[] a, byte[] b) {
        byte[] c = new byte[a.length + b.length];
        System.arraycopy(a, 0, c, 0, a.length);
        System.arraycopy(b, 0, c, a.length, b.length);
        return c;
    }

    /** A provision of job {@code job}, carrying the program and/or the shard. */
    public static Message.Provision provision(String job, boolean program, boolean shard) {
        return provision(job, program ? PROGRAM : null, shard ? X_BYTES : null, shard ? Y_BYTES : null);
    }

    public static Message.Provision provision(String job, byte[] program, byte[] x, byte[] y) {
        List<Tensor> ts = new ArrayList<>();
        if (program != null) {
            ts.add(Tensor.ofBytes("program", DType.UINT8, new long[] {program.length}, program));
        }
        if (x != null) {
            ts.add(Tensor.ofBytes("x", DType.FLOAT32, new long[] {3, 1, 2, 2}, x));
            ts.add(Tensor.ofBytes("y", DType.INT64, new long[] {3}, y));
        }
        return new Message.Provision(job, MODEL, PROGRAM_SHA, SHARD_SHA, ts);
    }

    public static List<Tensor> weights(float... w) {
        return List.of(Tensor.ofFloats("fc.weight", new long[] {w.length}, w), Tensor.ofBytes("steps", DType.INT64,
                new long[] {1}, Frames.i64(7)));
    }

    public static Message.Task task(String id, String job, long round, List<Tensor> weights) {
        return new Message.Task(id, job, round, 2, 2, 0.5, 0.9, 0.0, 30.0, PROGRAM_SHA, SHARD_SHA, weights);
    }

    public static ByteBuffer wire(Message.Binary m) {
        return Codec.encodeBinary(m, 1);
    }

    public static Message.Hello hello(String id, List<String> cached) {
        JsonObject hw = new JsonObject();
        hw.addProperty("model", "test");
        return new Message.Hello(id, "", "executorch", List.of(1), hw, cached, 1L << 20);
    }

    public static String welcome(int version, Double interval, Double timeout, Long maxMessage) {
        return Codec.encodeText(new Message.Welcome(version, "coord", new Message.Settings(interval, timeout, maxMessage, 65536L)));
    }
}
