import org.apache.nifi.components.PropertyDescriptor;
import org.apache.nifi.components.PropertyValue;
import org.apache.nifi.context.PropertyContext;

import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The properties of a controller service as NiFi's framework hands them to it: a property's value is the one set
 * (here: the map given) or else its descriptor's default value; isSet() is true when there is a value. No
 * Expression Language: values are taken as they are.
 */
final class DefaultsContext implements PropertyContext {
    private final Map<String, String> set;

    DefaultsContext(final Map<String, String> set) {
        this.set = new LinkedHashMap<>(set);
    }

    @Override
    public PropertyValue getProperty(final PropertyDescriptor descriptor) {
        final String value = set.containsKey(descriptor.getName()) ? set.get(descriptor.getName()) : descriptor.getDefaultValue();
        return new Value(value);
    }

    @Override
    public Map<String, String> getAllProperties() {
        return Map.copyOf(set);
    }

    private record Value(String value) implements PropertyValue {
        @Override
        public String getValue() { return value; }

        @Override
        public boolean isSet() { return value != null; }

        @Override
        public Boolean asBoolean() { return value == null ? null : Boolean.parseBoolean(value.trim()); }

        @Override
        public Integer asInteger() { return value == null ? null : Integer.parseInt(value.trim()); }

        @Override
        public boolean isExpressionLanguagePresent() { return false; }

        @Override
        public PropertyValue evaluateAttributeExpressions(final Map<String, String> attributes) { return this; }
    }
}
