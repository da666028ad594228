package org.mjfl.client.protocol;

/** The tensor dtypes of section 3; values are little-endian on the wire. */
public enum DType {
    FLOAT32("float32", 4, true),
    FLOAT64("float64", 8, true),
    FLOAT16("float16", 2, true),
    INT64("int64", 8, false),
    INT32("int32", 4, false),
    INT8("int8", 1, false),
    UINT8("uint8", 1, false);

    private final String wireName;
    private final int itemSize;
    private final boolean floating;

    DType(String wireName, int itemSize, boolean floating) {
        this.wireName = wireName;
        this.itemSize = itemSize;
        this.floating = floating;
    }

    public String wireName() {
        return wireName;
    }

    public int itemSize() {
        return itemSize;
    }

    /** Floating-point values must be finite in tasks and results (5.4, 5.5). */
    public boolean isFloating() {
        return floating;
    }

    /** The dtype with this wire name, or null. */
    public static DType fromWire(String name) {
        for (DType d : values()) {
            if (d.wireName.equals(name)) {
                return d;
            }
        }
        return null;
    }
}
