from twisted.application.service import ServiceMaker

rustka = ServiceMaker("rustka", "rustka.ops.tap", "Kafka-style event streaming broker", "rustka")
