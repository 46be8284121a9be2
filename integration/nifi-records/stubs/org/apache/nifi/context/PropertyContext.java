package org.apache.nifi.context;

import org.apache.nifi.components.PropertyDescriptor;
import org.apache.nifi.components.PropertyValue;

import java.util.Map;

/** Stand-in for nifi-api's PropertyContext. */
public interface PropertyContext {
    PropertyValue getProperty(PropertyDescriptor descriptor);

    Map<String, String> getAllProperties();
}
