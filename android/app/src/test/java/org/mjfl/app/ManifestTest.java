package org.mjfl.app;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import javax.xml.parsers.DocumentBuilderFactory;
import org.junit.jupiter.api.Test;
import org.w3c.dom.Document;
import org.w3c.dom.Element;
import org.w3c.dom.NodeList;

/**
 * What the manifest and the network security config let others do (docs/security.md): read
 * from the files the APK is built from.
 */
class ManifestTest {
    static final String ANDROID = "http://schemas.android.com/apk/res/android";
    /** src/main of the app: android/build-jvm.sh says where; Gradle runs tests in the module's folder. */
    static final Path MAIN = Path.of(System.getProperty("mjfl.app.main", "src/main"));

    static Document read(Path p) throws Exception {
        assertTrue(Files.isRegularFile(p), p + " not found (set -Dmjfl.app.main)");
        DocumentBuilderFactory f = DocumentBuilderFactory.newInstance();
        f.setNamespaceAware(true);
        f.setFeature("http://apache.org/xml/features/disallow-doctype-decl", true);
        return f.newDocumentBuilder().parse(p.toFile());
    }

    static List<Element> elements(Document d, String tag) {
        NodeList nodes = d.getElementsByTagName(tag);
        List<Element> out = new ArrayList<>();
        for (int i = 0; i < nodes.getLength(); i++) {
            out.add((Element) nodes.item(i));
        }
        return out;
    }

    @Test
    void onlyTheAdbShellCanStartTheDeviceOrItsSelfTestAndTheLauncherOnlyShowsIt() throws Exception {
        Document m = read(MAIN.resolve("AndroidManifest.xml"));
        // Every exported component, with the permission a caller needs ("" for none).
        Map<String, String> exported = new LinkedHashMap<>();
        for (String tag : List.of("activity", "activity-alias", "service", "receiver", "provider")) {
            for (Element e : elements(m, tag)) {
                boolean filtered = e.getElementsByTagName("intent-filter").getLength() > 0;
                String flag = e.getAttributeNS(ANDROID, "exported");
                if (flag.equals("true") || (flag.isEmpty() && filtered)) {
                    exported.put(e.getAttributeNS(ANDROID, "name"), e.getAttributeNS(ANDROID, "permission"));
                }
            }
        }
        assertEquals(Map.of(".MainActivity", "", ".StartActivity", "android.permission.DUMP",
                ".SelfTestActivity", "android.permission.DUMP"), exported);
    }

    @Test
    void cleartextGoesOnlyToTheLoopbackThatAdbReverseForwards() throws Exception {
        Document m = read(MAIN.resolve("AndroidManifest.xml"));
        Element app = elements(m, "application").get(0);
        assertEquals("", app.getAttributeNS(ANDROID, "usesCleartextTraffic"), "not app-wide");
        assertEquals("@xml/network_security_config", app.getAttributeNS(ANDROID, "networkSecurityConfig"));

        Document c = read(MAIN.resolve("res/xml/network_security_config.xml"));
        assertEquals("false", elements(c, "base-config").get(0).getAttribute("cleartextTrafficPermitted"));
        List<String> cleartext = new ArrayList<>();
        for (Element config : elements(c, "domain-config")) {
            if (config.getAttribute("cleartextTrafficPermitted").equals("true")) {
                NodeList domains = config.getElementsByTagName("domain");
                for (int i = 0; i < domains.getLength(); i++) {
                    Element d = (Element) domains.item(i);
                    assertEquals("false", d.getAttribute("includeSubdomains"), d.getTextContent());
                    cleartext.add(d.getTextContent().trim());
                }
            }
        }
        assertEquals(List.of("127.0.0.1", "localhost"), cleartext);
    }

    @Test
    void onlyTheBootLogRunsBeforeTheFirstUnlockAndNothingElseMayCallIt() throws Exception {
        Document m = read(MAIN.resolve("AndroidManifest.xml"));
        List<String> directBoot = new ArrayList<>();
        for (String tag : List.of("application", "activity", "service", "receiver", "provider")) {
            for (Element e : elements(m, tag)) {
                if (e.getAttributeNS(ANDROID, "directBootAware").equals("true")) {
                    directBoot.add(e.getAttributeNS(ANDROID, "name"));
                }
            }
        }
        assertEquals(List.of(".BootLog"), directBoot, "the app's storage is credential-encrypted: the rest waits");
        Element boot = elements(m, "receiver").get(0);
        assertEquals("false", boot.getAttributeNS(ANDROID, "exported"), "the system's broadcasts reach it regardless");
        List<String> actions = new ArrayList<>();
        for (Element a : elements(m, "action")) {
            if (a.getParentNode().getParentNode() == boot) {
                actions.add(a.getAttributeNS(ANDROID, "name"));
            }
        }
        assertEquals(List.of(ServiceStarts.LOCKED_BOOT_COMPLETED, ServiceStarts.BOOT_COMPLETED), actions);
    }

    @Test
    void theDevicesClockIsElapsedRealtimeWhichCountsSuspend() throws Exception {
        // Clock.SYSTEM (System.nanoTime) stops while the phone is suspended; heartbeats and
        // deadlines must be on AndroidClock.ELAPSED. Read from the sources: they run only on a phone.
        Path app = MAIN.resolve("java/org/mjfl/app");
        for (String file : List.of("DeviceService.java", "AndroidFacts.java")) {
            String src = Files.readString(app.resolve(file));
            assertTrue(!src.contains("Clock.SYSTEM"), file + " uses Clock.SYSTEM");
        }
        String service = Files.readString(app.resolve("DeviceService.java"));
        assertTrue(service.contains("new ExecuTorchTrainer(new AndroidMemory(this), AndroidClock.ELAPSED)"));
        assertTrue(service.contains("Clock clock = AndroidClock.ELAPSED;") && service.contains(".clock(clock)"));
        assertTrue(Files.readString(app.resolve("AndroidClock.java"))
                .contains("Clock.ofNanos(SystemClock::elapsedRealtimeNanos)"));
    }
}
