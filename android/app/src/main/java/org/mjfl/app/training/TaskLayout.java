package org.mjfl.app.training;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * How a task's tensors map onto a program (docs/models.md, "The program's parameters" and
 * "Batch-norm statistics"): each program parameter {@code model.<name>} is the task's
 * {@code <name>}; every other task tensor is a batch-norm buffer ({@code running_mean},
 * {@code running_var}, {@code num_batches_tracked}) of a layer, the layers in state-dict order,
 * which is also the order of the program's batch-statistics outputs.
 */
public final class TaskLayout {
    /** The prefix the exported wrapper puts before every state-dict name. */
    public static final String PARAM_PREFIX = "model.";

    /** The dtypes a task tensor may have here (the task's dtype is the result's). */
    public enum Kind { FLOAT32, INT64 }

    /** A task tensor as the layout needs it: name, dtype and shape. */
    public record Entry(String name, Kind kind, long[] shape) {
        public Entry {
            shape = shape.clone();
        }

        @Override
        public long[] shape() {
            return shape.clone();
        }
    }

    /**
     * One batch-norm layer: the task indices of its buffers ({@code tracked} -1 when the state
     * dict has none) and the pixels per channel it normalises.
     */
    public record BatchNormLayer(String prefix, int mean, int var, int tracked, int channels, long pixels) {}

    private final List<Entry> entries;
    /** For each task index: the program parameter name, or null for a batch-norm buffer. */
    private final String[] programName;
    private final List<BatchNormLayer> layers;

    private TaskLayout(List<Entry> entries, String[] programName, List<BatchNormLayer> layers) {
        this.entries = List.copyOf(entries);
        this.programName = programName;
        this.layers = List.copyOf(layers);
    }

    /**
     * Matches the task's tensors to the program.
     *
     * @param batchNormPixels the provision's {@code batch_norm_pixels}, one per layer (empty
     *     when the model has no batch norm)
     * @throws ProgramException when they do not fit: a program parameter the task lacks or
     *     has in another shape or dtype, a task tensor that is neither a parameter nor a
     *     batch-norm buffer, or batch-norm layers that differ in number from the program's
     *     statistics outputs or from {@code batchNormPixels}
     */
    public static TaskLayout of(List<Entry> task, ProgramSignature program, long[] batchNormPixels)
            throws ProgramException {
        Map<String, Integer> index = new LinkedHashMap<>();
        for (int i = 0; i < task.size(); i++) {
            if (index.put(task.get(i).name(), i) != null) {
                throw new ProgramException("task tensor " + task.get(i).name() + " appears twice");
            }
        }
        String[] programName = new String[task.size()];
        List<String> names = program.parameterNames();
        List<long[]> shapes = program.parameterShapes();
        for (int p = 0; p < names.size(); p++) {
            String full = names.get(p);
            if (!full.startsWith(PARAM_PREFIX)) {
                throw new ProgramException("program parameter " + full + " lacks the " + PARAM_PREFIX + " prefix");
            }
            String name = full.substring(PARAM_PREFIX.length());
            Integer i = index.get(name);
            if (i == null) {
                throw new ProgramException("the task has no tensor " + name + " for program parameter " + full);
            }
            Entry e = task.get(i);
            if (e.kind() != Kind.FLOAT32 || !Arrays.equals(e.shape, shapes.get(p))) {
                throw new ProgramException("task tensor " + name + " is " + e.kind() + Arrays.toString(e.shape)
                        + ", the program's parameter is FLOAT32" + Arrays.toString(shapes.get(p)));
            }
            programName[i] = full;
        }
        List<BatchNormLayer> layers = batchNormLayers(task, programName, batchNormPixels);
        if (layers.size() != program.batchNormLayers()) {
            throw new ProgramException("the task has " + layers.size() + " batch-norm layers, the program reports "
                    + "statistics of " + program.batchNormLayers() + " (" + program.gradientsIndex() + " outputs)");
        }
        return new TaskLayout(task, programName, layers);
    }

    private static final String[] BUFFERS = {"running_mean", "running_var", "num_batches_tracked"};

    private static List<BatchNormLayer> batchNormLayers(List<Entry> task, String[] programName,
            long[] batchNormPixels) throws ProgramException {
        // prefix -> task index of each buffer kind, in order of first appearance
        Map<String, int[]> found = new LinkedHashMap<>();
        for (int i = 0; i < task.size(); i++) {
            if (programName[i] != null) {
                continue;
            }
            String name = task.get(i).name();
            int dot = name.lastIndexOf('.');
            String prefix = dot < 0 ? "" : name.substring(0, dot);
            int kind = Arrays.asList(BUFFERS).indexOf(name.substring(dot + 1));
            if (kind < 0) {
                throw new ProgramException("task tensor " + name + " is neither a program parameter nor a batch-norm buffer");
            }
            int[] slots = found.computeIfAbsent(prefix, k -> new int[] {-1, -1, -1});
            slots[kind] = i;
        }
        if (found.size() != batchNormPixels.length) {
            throw new ProgramException("the task has " + found.size() + " batch-norm layers, the provision's "
                    + "batch_norm_pixels lists " + batchNormPixels.length);
        }
        List<BatchNormLayer> layers = new ArrayList<>();
        int l = 0;
        for (Map.Entry<String, int[]> e : found.entrySet()) {
            int[] s = e.getValue();
            String what = "batch-norm layer " + (e.getKey().isEmpty() ? "(root)" : e.getKey());
            if (s[0] < 0 || s[1] < 0) {
                throw new ProgramException(what + " lacks running_mean or running_var");
            }
            long[] meanShape = task.get(s[0]).shape;
            if (meanShape.length != 1 || !Arrays.equals(meanShape, task.get(s[1]).shape)
                    || task.get(s[0]).kind() != Kind.FLOAT32 || task.get(s[1]).kind() != Kind.FLOAT32) {
                throw new ProgramException(what + ": running_mean and running_var must be float32 [C] alike");
            }
            if (s[2] >= 0 && numel(task.get(s[2]).shape) != 1) {
                throw new ProgramException(what + ": num_batches_tracked must hold one value");
            }
            if (batchNormPixels[l] < 1) {
                throw new ProgramException("batch_norm_pixels[" + l + "] is " + batchNormPixels[l]);
            }
            layers.add(new BatchNormLayer(e.getKey(), s[0], s[1], s[2], Math.toIntExact(meanShape[0]), batchNormPixels[l]));
            l++;
        }
        return layers;
    }

    private static long numel(long[] shape) {
        long n = 1;
        for (long d : shape) {
            n *= d;
        }
        return n;
    }

    public List<Entry> entries() {
        return entries;
    }

    /** The program parameter of task tensor {@code i}, or null if it is a batch-norm buffer. */
    public String programName(int i) {
        return programName[i];
    }

    public List<BatchNormLayer> batchNormLayers() {
        return layers;
    }
}
