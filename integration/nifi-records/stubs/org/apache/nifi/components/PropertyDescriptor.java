package org.apache.nifi.components;

import org.apache.nifi.expression.ExpressionLanguageScope;

/**
 * Stand-in for nifi-api's PropertyDescriptor: keeps the name and the default value (what DefaultsContext reads);
 * everything else a descriptor declares (validators, allowable values, dependencies) is accepted and ignored.
 */
public final class PropertyDescriptor {
    private final String name;
    private final String defaultValue;

    private PropertyDescriptor(final Builder builder) {
        this.name = builder.name;
        this.defaultValue = builder.defaultValue;
    }

    public String getName() { return name; }

    public String getDisplayName() { return name; }

    public String getDefaultValue() { return defaultValue; }

    @Override
    public String toString() { return "PropertyDescriptor[" + name + "]"; }

    public static final class Builder {
        private String name;
        private String defaultValue;

        public Builder name(final String name) { this.name = name; return this; }

        public Builder displayName(final String displayName) { return this; }

        public Builder description(final String description) { return this; }

        public Builder defaultValue(final String value) { this.defaultValue = value; return this; }

        public Builder defaultValue(final DescribedValue value) { this.defaultValue = value == null ? null : value.getValue(); return this; }

        public Builder allowableValues(final String... values) { return this; }

        public Builder allowableValues(final DescribedValue... values) { return this; }

        public <E extends Enum<E>> Builder allowableValues(final Class<E> values) { return this; }

        public Builder addValidator(final Validator validator) { return this; }

        public Builder required(final boolean required) { return this; }

        public Builder sensitive(final boolean sensitive) { return this; }

        public Builder expressionLanguageSupported(final ExpressionLanguageScope scope) { return this; }

        public Builder dependsOn(final PropertyDescriptor property, final DescribedValue... values) { return this; }

        public Builder dependsOn(final PropertyDescriptor property, final String... values) { return this; }

        public PropertyDescriptor build() { return new PropertyDescriptor(this); }
    }
}
