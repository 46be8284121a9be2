package org.apache.nifi.components;

/** Stand-in for nifi-api's AllowableValue: a value with a display name and a description. */
public class AllowableValue implements DescribedValue {
    private final String value;
    private final String displayName;
    private final String description;

    public AllowableValue(final String value) {
        this(value, value, null);
    }

    public AllowableValue(final String value, final String displayName) {
        this(value, displayName, null);
    }

    public AllowableValue(final String value, final String displayName, final String description) {
        this.value = value;
        this.displayName = displayName;
        this.description = description;
    }

    @Override
    public String getValue() { return value; }

    @Override
    public String getDisplayName() { return displayName; }

    @Override
    public String getDescription() { return description; }

    @Override
    public String toString() { return value; }
}
