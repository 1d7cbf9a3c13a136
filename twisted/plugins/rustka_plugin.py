from twisted.application.service import ServiceMaker

rustka = ServiceMaker("rustka", "rustka.tap", "Kafka-style event streaming broker", "rustka")
