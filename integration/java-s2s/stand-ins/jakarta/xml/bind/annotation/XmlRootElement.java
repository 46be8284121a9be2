package jakarta.xml.bind.annotation;
import java.lang.annotation.*;
/** Build scaffolding only. */
@Retention(RetentionPolicy.RUNTIME)
public @interface XmlRootElement { String name() default "##default"; String namespace() default "##default"; }
