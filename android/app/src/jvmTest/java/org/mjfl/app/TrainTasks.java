package org.mjfl.app;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.mjfl.app.training.MemoryBudget;
import org.mjfl.client.net.Clock;
import org.mjfl.client.protocol.DType;
import org.mjfl.client.protocol.Message;
import org.mjfl.client.protocol.Tensor;
import org.mjfl.client.train.Shard;
import org.mjfl.client.train.TrainingResult;
import org.mjfl.client.train.TrainingTask;
import org.pytorch.executorch.training.PythonRuntime;

/**
 * Trains tasks written to files with the app's own {@link ExecuTorchTrainer}, one trainer for
 * all of them (so programs stay loaded between tasks, as on a phone), over the ExecuTorch test
 * double ({@code org.pytorch.executorch.**} in this source root, the runtime in Python).
 * tests/android/test_jvm_training.py writes the tasks and compares the results with mjfl's
 * emulated device.
 *
 * <p>{@code TrainTasks DIR}: {@code DIR/tasks.json} lists the tasks ({@code {"tasks": [...]}},
 * each with its folder, program, model spec, weights' names, dtypes and shapes, and the
 * training values); each task's folder holds {@code weights.bin} (the weights, little-endian,
 * in order) and {@code shard.bin} (the shard artifact: x then y). Written back: in each folder
 * {@code trained.bin} (the result's weights, same layout) and {@code result.json}, and
 * {@code DIR/live.json}, the runtime's modules and optimizers still alive once the trainer is
 * closed. The runtime's stderr goes to {@code DIR/executorch-runtime.log}.
 */
public final class TrainTasks {
    private TrainTasks() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            throw new IllegalArgumentException("usage: TrainTasks DIR");
        }
        Path dir = Path.of(args[0]);
        if (System.getProperty(PythonRuntime.LOG) == null) {
            System.setProperty(PythonRuntime.LOG, dir.resolve("executorch-runtime.log").toString());
        }
        JsonArray tasks = json(dir.resolve("tasks.json")).getAsJsonArray("tasks");
        try (ExecuTorchTrainer trainer = new ExecuTorchTrainer(MemoryBudget.UNLIMITED, Clock.SYSTEM)) {
            for (JsonElement e : tasks) {
                JsonObject spec = e.getAsJsonObject();
                Path folder = dir.resolve(spec.get("dir").getAsString());
                TrainingTask task = task(spec, folder);
                long start = System.nanoTime();
                TrainingResult result = trainer.train(task, () -> false);
                double seconds = (System.nanoTime() - start) / 1e9;
                try (OutputStream out = Files.newOutputStream(folder.resolve("trained.bin"))) {
                    for (Tensor t : result.weights()) {
                        ByteBuffer data = t.data();
                        byte[] raw = new byte[data.remaining()];
                        data.get(raw);
                        out.write(raw);
                    }
                }
                JsonObject r = new JsonObject();
                r.addProperty("samples", result.samples());
                r.addProperty("mean_loss", result.meanLoss());
                r.addProperty("seconds", seconds); // the program's loading included, on a first task
                JsonArray names = new JsonArray();
                result.weights().forEach(t -> names.add(t.name()));
                r.add("names", names);
                // The task's optimizer is released when its run closes, before train returns.
                r.addProperty("optimizers_after", PythonRuntime.get().live().get("optimizers"));
                write(folder.resolve("result.json"), r);
            }
        }
        JsonObject live = new JsonObject();
        for (Map.Entry<String, Integer> c : PythonRuntime.get().live().entrySet()) {
            live.addProperty(c.getKey(), c.getValue());
        }
        write(dir.resolve("live.json"), live);
    }

    private static TrainingTask task(JsonObject spec, Path folder) throws IOException {
        JsonObject m = spec.getAsJsonObject("model");
        List<List<Long>> dropout = new ArrayList<>();
        for (JsonElement s : m.getAsJsonArray("dropout_shapes")) {
            dropout.add(longs(s.getAsJsonArray()));
        }
        Message.ModelSpec model = new Message.ModelSpec(m.get("name").getAsString(), longs(m.getAsJsonArray("input_shape")),
                m.get("num_classes").getAsLong(), longs(m.getAsJsonArray("batch_norm_pixels")), dropout);
        List<Tensor> weights = new ArrayList<>();
        ByteBuffer raw = ByteBuffer.wrap(Files.readAllBytes(folder.resolve("weights.bin")));
        for (JsonElement w : spec.getAsJsonArray("weights")) {
            JsonObject o = w.getAsJsonObject();
            DType dtype = DType.fromWire(o.get("dtype").getAsString());
            long[] shape = longs(o.getAsJsonArray("shape")).stream().mapToLong(Long::longValue).toArray();
            byte[] bytes = new byte[(int) Tensor.nbytes(dtype, shape)];
            raw.get(bytes);
            weights.add(Tensor.ofBytes(o.get("name").getAsString(), dtype, shape, bytes));
        }
        if (raw.hasRemaining()) {
            throw new IllegalArgumentException(folder + "/weights.bin is longer than its weights");
        }
        Shard shard = Shard.fromArtifact(Files.readAllBytes(folder.resolve("shard.bin")), model);
        return new TrainingTask(folder.getFileName().toString(), "job", 1, model, Path.of(spec.get("program").getAsString()),
                shard, weights, spec.get("epochs").getAsLong(), spec.get("batch_size").getAsLong(),
                spec.get("lr").getAsDouble(), spec.get("momentum").getAsDouble(), spec.get("weight_decay").getAsDouble(),
                Double.POSITIVE_INFINITY, spec.get("seed").getAsLong());
    }

    private static List<Long> longs(JsonArray a) {
        List<Long> out = new ArrayList<>();
        a.forEach(e -> out.add(e.getAsLong()));
        return out;
    }

    private static JsonObject json(Path p) throws IOException {
        return JsonParser.parseString(Files.readString(p)).getAsJsonObject();
    }

    private static void write(Path p, JsonObject o) throws IOException {
        Files.writeString(p, o.toString(), StandardCharsets.UTF_8);
    }
}
