package org.mjfl.client.cache;

import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.FileTime;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import java.util.logging.Level;
import java.util.logging.Logger;
import java.util.regex.Pattern;
import org.mjfl.client.protocol.Sha256;

/**
 * Programs and shards on disk, named by their sha256 (protocol.md section 6), kept across
 * sessions so that a hello can list them in {@code cached} and the coordinator does not resend
 * them. Every file is verified on write and on load; {@link #list()} names only files that are
 * present and whole (never list what is missing: a listed artifact must be kept, section 6).
 * A file that fails verification is deleted.
 *
 * <p>Safe for several threads and processes sharing a directory: writes go to a temporary file
 * renamed into place, so a name only ever holds its complete content.
 */
public final class ArtifactCache {
    private static final Logger LOG = Logger.getLogger(ArtifactCache.class.getName());
    private static final Pattern NAME = Pattern.compile("[0-9a-f]{64}");

    private final Path dir;
    /** Files already hashed, by name: size and mtime when they verified (rehashing every hello is wasted work). */
    private final Map<String, Stamp> verified = new ConcurrentHashMap<>();

    private record Stamp(long size, FileTime mtime) {}

    public ArtifactCache(Path dir) throws IOException {
        this.dir = Files.createDirectories(dir);
    }

    public Path dir() {
        return dir;
    }

    /**
     * Stores the bytes under their sha256 after checking that they hash to {@code sha256}.
     *
     * @throws IllegalArgumentException if they do not
     */
    public void put(String sha256, ByteBuffer... parts) throws IOException {
        if (!NAME.matcher(sha256).matches()) {
            throw new IllegalArgumentException("not a sha256: " + sha256);
        }
        String actual = Sha256.of(parts);
        if (!actual.equals(sha256)) {
            throw new IllegalArgumentException("content hashes to " + actual + ", not " + sha256);
        }
        Path target = dir.resolve(sha256);
        Path tmp = Files.createTempFile(dir, sha256 + ".", ".tmp");
        try {
            try (FileChannel ch = FileChannel.open(tmp, StandardOpenOption.WRITE)) {
                for (ByteBuffer p : parts) {
                    ByteBuffer b = p.duplicate();
                    while (b.hasRemaining()) {
                        ch.write(b);
                    }
                }
                ch.force(true);
            }
            try {
                Files.move(tmp, target, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
            } catch (AtomicMoveNotSupportedException e) {
                Files.move(tmp, target, StandardCopyOption.REPLACE_EXISTING);
            }
        } finally {
            Files.deleteIfExists(tmp);
        }
        verified.put(sha256, stamp(target));
    }

    /** The artifact's bytes, verified; empty if it is missing or corrupt (then it is deleted). */
    public Optional<byte[]> load(String sha256) {
        if (!NAME.matcher(sha256).matches()) {
            return Optional.empty();
        }
        Path p = dir.resolve(sha256);
        try {
            byte[] bytes = Files.readAllBytes(p);
            if (!Sha256.of(bytes).equals(sha256)) {
                discard(p, "content does not match its name");
                return Optional.empty();
            }
            return Optional.of(bytes);
        } catch (IOException e) {
            verified.remove(sha256);
            return Optional.empty();
        }
    }

    /** The file of an artifact that is present and verifies (e.g. a program for a runtime that loads paths). */
    public Optional<Path> path(String sha256) {
        return NAME.matcher(sha256).matches() && isWhole(sha256) ? Optional.of(dir.resolve(sha256)) : Optional.empty();
    }

    /** Whether the artifact is present and verifies. */
    public boolean contains(String sha256) {
        return path(sha256).isPresent();
    }

    /** Every artifact present and whole, sorted; what a hello's {@code cached} lists. */
    public List<String> list() throws IOException {
        List<String> names = new ArrayList<>();
        try (DirectoryStream<Path> ds = Files.newDirectoryStream(dir)) {
            for (Path p : ds) {
                String name = p.getFileName().toString();
                if (NAME.matcher(name).matches() && isWhole(name)) {
                    names.add(name);
                }
            }
        }
        Collections.sort(names);
        return names;
    }

    private boolean isWhole(String name) {
        Path p = dir.resolve(name);
        try {
            Stamp now = stamp(p);
            if (now.equals(verified.get(name))) {
                return true;
            }
            if (!hashFile(p).equals(name)) {
                discard(p, "content does not match its name");
                return false;
            }
            verified.put(name, now);
            return true;
        } catch (IOException e) {
            verified.remove(name);
            return false;
        }
    }

    private void discard(Path p, String why) {
        String name = p.getFileName().toString();
        verified.remove(name);
        LOG.warning("artifact " + name + " discarded: " + why);
        try {
            Files.deleteIfExists(p);
        } catch (IOException e) {
            LOG.log(Level.WARNING, "could not delete " + p, e);
        }
    }

    private static Stamp stamp(Path p) throws IOException {
        return new Stamp(Files.size(p), Files.getLastModifiedTime(p));
    }

    private static String hashFile(Path p) throws IOException {
        MessageDigest md = Sha256.digest();
        byte[] buf = new byte[1 << 16];
        try (InputStream in = Files.newInputStream(p)) {
            for (int n; (n = in.read(buf)) > 0; ) {
                md.update(buf, 0, n);
            }
        }
        return Sha256.hex(md.digest());
    }
}
