package org.apache.nifi.components;

import java.util.Map;

/** Stand-in for nifi-api's PropertyValue: only the methods the compiled NiFi classes call. */
public interface PropertyValue {
    String getValue();

    /** nifi-api: true when the property has a value (set, or by its default). */
    boolean isSet();

    Boolean asBoolean();

    Integer asInteger();

    boolean isExpressionLanguagePresent();

    PropertyValue evaluateAttributeExpressions(Map<String, String> attributes);
}
