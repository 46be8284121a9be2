package org.apache.nifi.components;

/** Stand-in for nifi-api's ValidationContext (declarations only). */
public interface ValidationContext {
    boolean isExpressionLanguageSupported(String propertyName);

    boolean isExpressionLanguagePresent(String value);
}
