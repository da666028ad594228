package org.mjfl.client;

import com.google.gson.JsonObject;
import java.net.InetAddress;
import java.net.UnknownHostException;

/** What a plain JVM knows about its machine, for the hello's {@code hardware}. */
public final class JvmFacts implements DeviceFacts {
    private final String trainer;

    public JvmFacts() {
        this(null);
    }

    /** @param trainer said in the hello as {@code trainer} (e.g. "stand-in"), or null */
    public JvmFacts(String trainer) {
        this.trainer = trainer;
    }

    @Override
    public JsonObject hardware() {
        JsonObject h = new JsonObject();
        h.addProperty("model", "jvm");
        h.addProperty("cores", Runtime.getRuntime().availableProcessors());
        h.addProperty("ram_mb", Runtime.getRuntime().maxMemory() / (1024 * 1024));
        h.addProperty("os", System.getProperty("os.name") + " " + System.getProperty("os.version")
                + " (" + System.getProperty("os.arch") + ")");
        h.addProperty("java", System.getProperty("java.version"));
        h.addProperty("host", hostname());
        if (trainer != null) {
            h.addProperty("trainer", trainer);
        }
        return h;
    }

    /** The host name, as the launcher's default id prefix uses it. */
    public static String hostname() {
        String env = System.getenv("HOSTNAME");
        if (env != null && !env.trim().isEmpty()) {
            return env;
        }
        try {
            return InetAddress.getLocalHost().getHostName();
        } catch (UnknownHostException e) {
            return "localhost";
        }
    }
}
