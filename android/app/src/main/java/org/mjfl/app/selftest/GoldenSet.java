package org.mjfl.app.selftest;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParseException;
import com.google.gson.JsonParser;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * A golden set as mjfl writes it ({@code mjfl/device/emulated/golden.py}): a folder of
 * case folders and {@code manifest.json}, which names the cases in order and the tolerance.
 *
 * @param folder where the set is
 * @param key the set's content key (what made it: programs, trainer, cases)
 * @param tolerance the largest relative difference per tensor that passes
 * @param cases the case folders' names, in order
 */
public record GoldenSet(Path folder, String key, double tolerance, List<String> cases) {
    /** The format of sets this app reads (golden.py's {@code FORMAT}). */
    public static final int FORMAT = 1;

    public GoldenSet {
        cases = List.copyOf(cases);
    }

    /**
     * Reads the manifest of the set in {@code folder}.
     *
     * @throws IOException when it is missing, malformed, or of another format
     */
    public static GoldenSet read(Path folder) throws IOException {
        Path manifest = folder.resolve("manifest.json");
        if (!Files.isRegularFile(manifest)) {
            throw new IOException("no golden set at " + folder + " (" + manifest.getFileName() + " not found)");
        }
        try {
            JsonObject o = JsonParser.parseString(new String(Files.readAllBytes(manifest), StandardCharsets.UTF_8)).getAsJsonObject();
            int format = o.get("format").getAsInt();
            if (format != FORMAT) {
                throw new IOException("golden set format " + format + " at " + folder + "; this app reads " + FORMAT
                        + " (make the set with the mjfl of this app's build)");
            }
            double tolerance = o.get("tolerance").getAsDouble();
            if (!(tolerance >= 0)) {
                throw new IOException("bad tolerance " + tolerance + " in " + manifest);
            }
            List<String> cases = new ArrayList<>();
            JsonArray names = o.getAsJsonArray("cases");
            for (JsonElement e : names) {
                String name = e.getAsString();
                if (!name.matches("[A-Za-z0-9._-]+") || name.startsWith(".")) {
                    throw new IOException("bad case name " + name + " in " + manifest);
                }
                cases.add(name);
            }
            return new GoldenSet(folder, o.get("key").getAsString(), tolerance, cases);
        } catch (JsonParseException | IllegalStateException | NullPointerException | UnsupportedOperationException e) {
            throw new IOException("malformed " + manifest + ": " + e.getMessage(), e);
        }
    }
}
