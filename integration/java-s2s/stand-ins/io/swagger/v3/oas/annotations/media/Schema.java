package io.swagger.v3.oas.annotations.media;
import java.lang.annotation.*;
/** Build scaffolding only: lets javac compile NiFi's DTO classes; carries no behaviour. */
@Retention(RetentionPolicy.RUNTIME)
public @interface Schema {
    String description() default "";
    String name() default "";
    String type() default "";
    String format() default "";
    String example() default "";
    String defaultValue() default "";
    String[] allowableValues() default {};
    boolean deprecated() default false;
    boolean hidden() default false;
    Class<?> implementation() default Void.class;
    AccessMode accessMode() default AccessMode.AUTO;
    RequiredMode requiredMode() default RequiredMode.AUTO;
    enum AccessMode { AUTO, READ_ONLY, WRITE_ONLY, READ_WRITE }
    enum RequiredMode { AUTO, REQUIRED, NOT_REQUIRED }
}
