package jakarta.xml.bind.annotation;
import java.lang.annotation.*;
/** Build scaffolding only. */
@Retention(RetentionPolicy.RUNTIME)
public @interface XmlType { String name() default "##default"; String[] propOrder() default {""}; String namespace() default "##default"; }
