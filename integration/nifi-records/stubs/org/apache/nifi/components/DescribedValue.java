package org.apache.nifi.components;

/** Stand-in for nifi-api's DescribedValue (declarations only). */
public interface DescribedValue {
    String getValue();

    String getDisplayName();

    String getDescription();
}
